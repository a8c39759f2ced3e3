"""NHWC convolutions in float16, bfloat16 and TF32 on Hopper as GEMMs on the wgmma template's kernel (wgmma.py):
N*OH*OW output pixels x (K*K*C products) x F filters, the weights F x K x K x C being B stored column-major.

A pointwise convolution (1x1 kernel, stride 1, no padding, its pixels in 64s) is that matmul as its tensors lie:
the input's pixels are the rows of A, their C channels contiguous; the kernel, knobs and rules are the matmul's.
Every other one (whose channels come in 128-byte K tiles and filters in 64s) is an implicit GEMM: a row tile is
a rectangle of `width` x rows / `width` output pixels of one image, and each K tile a box of the input at one
(kernel row, kernel column) offset, read by TMA with the stride as its element stride and zeros in the padding
(wgmma_rows.py's `PixelRows`); the knobs are the matmul's and `width` (discrete [8, 16, 32, 64]).  Other GPUs,
and convolutions neither form takes, run conv2d_nhwc.py's direct kernel.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constraints import Rule
from ..workload import Workload
from . import wgmma
from .common import MAX_GRID_Y
from .conv2d_nhwc import prim_func  # the same computation, for MetaSchedule
from .wgmma import compile_kernel
from .wgmma_kernel import kernel
from .wgmma_operand import k_tile
from .wgmma_rows import PixelRows

if TYPE_CHECKING:
    import tvm

    from ..target import Target

__all__ = ["applies", "search_space", "upgrade", "default_params", "prim_func", "schedule", "resources", "rules",
           "compile_kernel", "as_matmul"]

WIDTHS = [8, 16, 32, 64]
MAX_BOX = 256  # elements of a TMA box along a dimension


def as_matmul(wl: Workload) -> Workload:
    """The matmul of a pointwise `wl`'s tensors (N*H*W x C times (F x C)^T), or, for an implicit GEMM, its K and M
    (K*K*C, F) with a stand-in N of two 128-row tiles: its rows are `PixelRows`', which rules of their own keep."""
    d = wl.dims
    rows = d["N"] * d["HW"] ** 2 if is_matmul(wl) else 256
    dims = {"N": rows, "K": d["K"] ** 2 * d["C"], "M": d["F"]}
    return Workload("mm", f"N{dims['N']}K{dims['K']}M{dims['M']}PNT_{wl.element.suffix}", dims, "NT", wl.dtype)


def is_matmul(wl: Workload) -> bool:
    """A pointwise convolution whose pixels come in 64s: the matmul itself."""
    d = wl.dims
    return d["K"] == 1 and d["ST"] == 1 and d["PD"] == 0 and d["N"] * d["HW"] ** 2 % 64 == 0


def applies(wl: Workload, target: Target | None) -> bool:
    d = wl.dims
    whole = d["C"] % k_tile(wl.element.itemsize) == 0 and d["F"] % 64 == 0
    return (is_matmul(wl) or whole) and wgmma.applies(as_matmul(wl), target)


def search_space(wl: Workload) -> dict[str, Any]:
    space = wgmma.search_space(as_matmul(wl))
    return space if is_matmul(wl) else {**space, "width": {"_type": "discrete", "_value": WIDTHS}}


def upgrade(wl: Workload, params: dict[str, Any]) -> dict[str, Any]:
    return wgmma.upgrade(as_matmul(wl), params)


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """The matmul's; an implicit GEMM's tiles as wide as cover the output exactly, else 16 pixels wide (8 where
    the output is narrower)."""
    found = wgmma.default_params(as_matmul(wl), gpu)
    if is_matmul(wl):
        return found
    out, rows = wl.out_hw, found["rows"]
    covering = [w for w in WIDTHS if out % w == 0 and out % (rows // w) == 0]
    return {**found, "width": covering[-1] if covering else 16 if out >= 16 else 8}


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    return wgmma.resources(as_matmul(wl), p)


def rules(wl: Workload) -> list[Rule]:
    """The matmul's rules (wgmma.py); an implicit GEMM's tiles (`width` <= 64 <= rows) also fit TMA's boxes, pair
    up in clusters and fit the grid, and its K tiles stay within one kernel offset's channels."""
    if is_matmul(wl):
        return wgmma.rules(as_matmul(wl))
    d, depth = wl.dims, k_tile(wl.element.itemsize)

    def count(c: dict[str, Any]) -> int:
        return PixelRows(wl, c["rows"], c["width"]).count

    return [*wgmma.rules(as_matmul(wl)),
            Rule(lambda r, c: float(d["C"] % depth != 0), 0.0, grows=False,
                 message=lambda r, c: f"C {d['C']} is not a multiple of the {depth}-channel K tile"),
            Rule(lambda r, c: float(max(c["width"], c["rows"] // c["width"]) * d["ST"] > MAX_BOX), 0.0, grows=False,
                 message=lambda r, c: f"a tile of {c['width']} x {c['rows'] // c['width']} pixels at stride {d['ST']} "
                                      f"spans more than the {MAX_BOX} elements of a TMA box"),
            Rule(lambda r, c: float(count(c) % c["cluster"] != 0), 0.0, grows=False,
                 message=lambda r, c: f"{count(c)} pixel tiles do not pair up in clusters of {c['cluster']}"),
            Rule(lambda r, c: float(c["cluster"] * c["split"] == 1 and count(c) > MAX_GRID_Y), 0.0, grows=False,
                 message=lambda r, c: f"{count(c)} pixel tiles exceed the {MAX_GRID_Y} grid rows")]


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    import tvm

    pixels = None if is_matmul(wl) else PixelRows(wl, p["rows"], p["width"])
    return tvm.IRModule({"main": kernel(as_matmul(wl), p, (*wl.input_shapes, wl.output_shape), pixels)})

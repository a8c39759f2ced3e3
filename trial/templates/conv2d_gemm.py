"""A pointwise convolution (1x1 kernel, stride 1, no padding) in NHWC is a matmul: the input's N*H*W pixels are
the rows of A, their C channels contiguous (K-major); the weights F x 1 x 1 x C are B stored column-major (K-major
too); the NHWC output is C = A B, N*H*W rows of F filters.  On Hopper such a convolution in float16, bfloat16 or
TF32 runs the wgmma template's kernel (wgmma.py) on those matrices, with its knobs, rules and resources, the
convolution's tensors its buffers.  Every other convolution, and every other GPU, takes conv2d_nhwc.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constraints import Rule
from ..workload import Workload
from . import wgmma
from .conv2d_nhwc import prim_func  # the same computation, for MetaSchedule
from .wgmma import compile_kernel
from .wgmma_kernel import kernel

if TYPE_CHECKING:
    import tvm

    from ..target import Target

__all__ = ["applies", "search_space", "upgrade", "default_params", "prim_func", "schedule", "resources", "rules",
           "compile_kernel", "as_matmul"]


def pointwise(wl: Workload) -> bool:
    d = wl.dims
    return d["K"] == 1 and d["ST"] == 1 and d["PD"] == 0


def as_matmul(wl: Workload) -> Workload:
    """The matmul `wl`'s tensors hold: N*H*W x C times (F x C)^T, both operands K-major (PNT), in `wl`'s type."""
    d = wl.dims
    dims = {"N": d["N"] * d["HW"] ** 2, "K": d["C"], "M": d["F"]}
    return Workload("mm", f"N{dims['N']}K{dims['K']}M{dims['M']}PNT_{wl.element.suffix}", dims, "NT", wl.dtype)


def applies(wl: Workload, target: Target | None) -> bool:
    return pointwise(wl) and wgmma.applies(as_matmul(wl), target)


def search_space(wl: Workload) -> dict[str, Any]:
    return wgmma.search_space(as_matmul(wl))


def upgrade(wl: Workload, params: dict[str, Any]) -> dict[str, Any]:
    return wgmma.upgrade(as_matmul(wl), params)


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    return wgmma.default_params(as_matmul(wl), gpu)


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    return wgmma.resources(as_matmul(wl), p)


def rules(wl: Workload) -> list[Rule]:
    """The matmul's rules (wgmma.py), on a pointwise convolution only."""
    return [Rule(lambda r, c: float(not pointwise(wl)), 0.0, grows=False,
                 message=lambda r, c: f"the wgmma matmul computes 1x1 convolutions of stride 1 without padding, not "
                                      f"a {wl.dims['K']}x{wl.dims['K']} kernel of stride {wl.dims['ST']}, padding "
                                      f"{wl.dims['PD']}: conv2d_nhwc.py's knobs serve it"),
            *wgmma.rules(as_matmul(wl))]


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    import tvm

    return tvm.IRModule({"main": kernel(as_matmul(wl), p, shapes=(*wl.input_shapes, wl.output_shape))})

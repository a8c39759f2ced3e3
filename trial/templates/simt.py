"""Float32 matmul and batched matmul on Hopper's CUDA cores, written in TVM's TIRx script layer: TMA-fed stages,
warp tiles laid out as CUTLASS's SIMT GEMMs lay them out, and K divided among warps of a CTA or CTAs of a cluster.

The portable template (matmul.py) stayed short of cuBLAS on mm/N512K4096M1024.  Nsight Compute put
the gap in its main loop (more instructions for the same FFMAs: every thread computes its copy
addresses, and its 64-sum tiles need twice cuBLAS's shared loads) and in its split-K, whose second kernel
sums the partial results.  Here one thread copies each stage with the tensor memory accelerator (TMA),
consumer warps hold up to 16 x 16 sums a thread and read shared memory only in 16-byte loads, groups of
warps can take alternate K tiles of one block tile, and CTAs that split K form a cluster and add their
partial tiles through distributed shared memory (simt_kernel.py).

Knobs:
  warps_r  discrete [1, 2, 4, 8]   consumer warps along the rows (N) of the block tile
  warps_c  discrete [1, 2, 4, 8]   consumer warps along the columns (M)
  tm       discrete [4, 8, 16]     rows per thread (in blocks of 4, 16 rows apart): rows = warps_r * 4 * tm
  tn       discrete [4, 8, 16]     columns per thread (in blocks of 4, 32 apart): cols = warps_c * 8 * tn
  bk       discrete [8, 16, 32]    depth of a shared K tile
  stages   discrete [2, ..., 8]    shared K tiles in flight
  split    discrete [1, 2, 4, 8]   CTAs of a cluster that split K for one output tile
  slices   discrete [1, 2, 4]      groups of consumer warps that slice K within the CTA: slice j takes K
                                   tiles j, j + s, ... for the same block tile (needs producer 1, and
                                   stages in multiples of slices: each stage serves one slice)
  producer discrete [0, 1]         who issues the copies: 0, the first consumer thread, refilling the
                                   previous K tile's stage; 1, a warp of its own

Only float32 mm and bmm on sm_90 (any layout: a K-major B, as `nn.Linear`'s weight, is read through the TMA's
swizzle), N and M multiples of 64 and K of 8 (`applies`); elsewhere matmul.py serves.  A bmm's products share
one launch, each of its CTAs computing a tile of one product (simt_kernel.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constraints import Rule
from ..workload import Workload
from .common import MAX_GRID_Y
from .k_split import slice_rules
from .matmul import prim_func  # the same computation, for MetaSchedule
from .simt_kernel import WARP, block_tile, kernel, shared_bytes

if TYPE_CHECKING:
    import tvm

    from ..target import Target

__all__ = ["applies", "search_space", "default_params", "prim_func", "schedule", "resources", "rules",
           "compile_kernel"]

TMA_BOX = 256  # the most elements a TMA box spans in a dimension
REGISTERS_OVER_SUMS = 60
"""Registers a thread needs beyond its sums and fragments (addresses, loop and barrier state), as ptxas
counts them for this kernel (tests/test_simt.py)."""


def applies(wl: Workload, target: Target | None) -> bool:
    """Whether this template serves `wl` on `target`: float32 mm or bmm on a Hopper GPU, in whole tiles of
    `default_params`'s smaller kind."""
    d = wl.dims
    return (target is not None and target.kind == "cuda" and target.cuda_arch == 90 and wl.op in ("mm", "bmm")
            and wl.dtype == "float32" and d["N"] % 64 == 0 and d["M"] % 64 == 0
            and d["K"] % 8 == 0 and grid_rows(wl, default_params(wl, True)) <= MAX_GRID_Y)


def grid_rows(wl: Workload, p: dict[str, Any]) -> int:
    """The grid's rows where CTAs do not split K (a cluster grid is launched flat): a row for each row tile of
    each of bmm's B products."""
    return wl.dims["N"] // block_tile(p)[0] * wl.dims.get("B", 1)


def search_space(wl: Workload) -> dict[str, Any]:
    return {"warps_r": {"_type": "discrete", "_value": [1, 2, 4, 8]},
            "warps_c": {"_type": "discrete", "_value": [1, 2, 4, 8]},
            "tm": {"_type": "discrete", "_value": [4, 8, 16]},
            "tn": {"_type": "discrete", "_value": [4, 8, 16]},
            "bk": {"_type": "discrete", "_value": [8, 16, 32]},
            "stages": {"_type": "discrete", "_value": list(range(2, 9))},
            "split": {"_type": "discrete", "_value": [1, 2, 4, 8]},
            "slices": {"_type": "discrete", "_value": [1, 2, 4]},
            "producer": {"_type": "discrete", "_value": [0, 1]}}


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """Configs OpEvo found on an H100, where the shape takes them: with enough 256 x 64 tiles to fill an
    H100's 132 SMs, those, 8 x 8 sums a thread (as on mm/N512K1024M4096); with fewer, 128 x 64 tiles of 8 x 8
    sums a thread, K sliced in 2 and split in 2 (as on mm/N512K4096M1024); otherwise 64 x 64 tiles of 4 x 8
    sums a thread (and on every bmm, whose products are small).  32-deep K tiles where K allows, a producer
    warp."""
    n, k, m, mm = wl.dims["N"], wl.dims["K"], wl.dims["M"], wl.op == "mm"
    if mm and n % 256 == 0 and n // 256 * (m // 64) >= 120 and k % 32 == 0:
        return {"warps_r": 8, "warps_c": 1, "tm": 8, "tn": 8, "bk": 32, "stages": 5, "split": 1, "slices": 1,
                "producer": 1}
    if mm and n % 128 == 0 and k % 128 == 0:
        return {"warps_r": 4, "warps_c": 1, "tm": 8, "tn": 8, "bk": 32, "stages": 6, "split": 2, "slices": 2,
                "producer": 1}
    return {"warps_r": 4, "warps_c": 1, "tm": 4, "tn": 8, "bk": 8, "stages": 3, "split": 1, "slices": 1,
            "producer": 1}


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """The consumer warps and the producer warp; dynamic shared memory for the stages (or a split CTA's partial
    tile); registers: the sums, A's fragments of four K steps and B's of one (four where B is K-major), and
    `REGISTERS_OVER_SUMS`."""
    threads = (p["warps_r"] * p["warps_c"] * p["slices"] + p["producer"]) * WARP
    b_kmajor = wl.layout[1] == "T"
    registers = p["tm"] * p["tn"] + 4 * p["tm"] + (4 if b_kmajor else 1) * p["tn"] + REGISTERS_OVER_SUMS
    return {"threads": threads, "thread_dims": (threads, 1, 1), "shared_bytes": shared_bytes(p, b_kmajor),
            "registers_per_thread": registers, "exact_cuda_arch": 90}


def rules(wl: Workload) -> list[Rule]:
    """Whole tiles only (the TMA would fill a partial box with zeros, but the loops and stores take whole
    tiles): the block tile divides N and M, and each split CTA and each K slice gets whole K tiles; a TMA box
    spans at most 256 rows; a split CTA sums whole quads of every thread's sums.  K slices need the producer
    warp and a whole number of stages each.  A grid without clusters holds at most `MAX_GRID_Y` rows."""
    d = wl.dims
    return [Rule(lambda r, c: float(d["N"] % block_tile(c)[0] != 0), 0.0, grows=False,
                 message=lambda r, c: f"the tile's {block_tile(c)[0]} rows do not divide N {d['N']}"),
            Rule(lambda r, c: float(d["M"] % block_tile(c)[1] != 0), 0.0, grows=False,
                 message=lambda r, c: f"the tile's {block_tile(c)[1]} columns do not divide M {d['M']}"),
            Rule(lambda r, c: float(max(block_tile(c))), TMA_BOX,
                 message=lambda r, c: f"a {block_tile(c)[0]} x {block_tile(c)[1]} tile is more than a TMA box "
                                      f"of {TMA_BOX} rows"),
            Rule(lambda r, c: float(d["K"] % (c["bk"] * c["split"] * c["slices"]) != 0), 0.0, grows=False,
                 message=lambda r, c: f"split {c['split']} x slices {c['slices']} x bk {c['bk']} does not divide "
                                      f"K {d['K']}"),
            *slice_rules(),
            Rule(lambda r, c: float(c["tm"] * c["tn"] // 4 % c["split"] != 0), 0.0, grows=False,
                 message=lambda r, c: f"split {c['split']} does not divide a thread's {c['tm'] * c['tn'] // 4} "
                                      f"quads of sums"),
            Rule(lambda r, c: float(c["split"] == 1 and grid_rows(wl, c) > MAX_GRID_Y), 0.0, grows=False,
                 message=lambda r, c: f"{grid_rows(wl, c)} row tiles of {block_tile(c)[0]} rows exceed the "
                                      f"{MAX_GRID_Y} grid rows (gridDim.y) CUDA launches: taller tiles, or split > 1")]


def compile_kernel(mod: tvm.IRModule, target: Target, explicit_unroll: bool = False) -> Any:
    """TVM's TIRx pipeline, in the target's scope (TVM's CUDA compile callback reads the arch from it).

    The kernel's `T.unroll` loops reach CUDA as loops under `#pragma unroll`, which NVVM unrolls, unless
    `explicit_unroll` has TVM unroll them in the source.  Left to NVVM, the source is 5-15x shorter, a build
    takes about 40 % of the time, and the kernels make the same instructions and time within 2 % or faster
    (`python -m benchmarks.unrolling`, docs/results.md)."""
    import tvm

    hopper = tvm.target.Target(target.target)
    with tvm.transform.PassContext(config={"tirx.UnrollLoop": {"explicit_unroll": explicit_unroll}}), hopper:
        return tvm.compile(mod, target=hopper, tir_pipeline="tirx")


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    import tvm

    return tvm.IRModule({"main": kernel(wl, p)})

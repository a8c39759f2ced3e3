"""Float16, bfloat16, float8 e4m3, int8 and TF32 matmul and batched matmul on Hopper's warpgroup MMA (wgmma, CUDA
sm_90a), written in TVM's TIRx script layer.

The `mma.sync` kernels of tensorcore.py load every fragment from shared memory into registers with
`ldmatrix`; on an H100 they reach about 45 % of cuBLAS on the study's float16 matmuls.  Here a
warpgroup (4 warps, 128 threads) multiplies 64 x `cols` tiles straight out of shared memory, described
by matrix descriptors, and one thread (of the consumers, or of a producer warpgroup) fills the shared
stages with the tensor memory accelerator (TMA, `cp.async.bulk.tensor`), each stage guarded by an
mbarrier that counts the bytes arriving.
TensorIR's `tensorize` offers no wgmma in TVM 0.27, so the kernel is a TIRx function with its tile
sizes as knobs, compiled with TVM's "tirx" pipeline, rather than a schedule of `prim_func`.

Knobs:
  rows      discrete [64, 128, 192]       block tile rows (N): one to three warpgroups of 64 rows each; a
                                          matrix's last row tile may reach past N (192 x 192 tiles of
                                          2,048 x 2,304 are 11 x 12, one wave of an H100's 132 SMs)
  cols      discrete [64, 128, 192, 256]  block tile columns (M): the n of each m64nNk16 wgmma (k32: 8-bit,
                                          k8: TF32); int8's wgmma takes at most 224
  stages    discrete [2, ..., 14]         shared buffers of 128-byte-deep K tiles in flight (64 elements of a
                                          16-bit type, 128 of an 8-bit one, 32 of TF32; as many as the
                                          device's shared memory holds: 14 of 64 x 64 tiles, 7 of 128 x 128)
  in_flight discrete [0, 1]               wgmma groups left running when a stage is refilled: with 1 the
                                          refill waits only for the previous K tile's group
  producer  discrete [0, 1]               who issues the copies: 0, the first thread, after all threads
                                          meet at a barrier each K tile; 1, a warpgroup of its own that
                                          refills a stage when the consumers' mbarrier says it is free
  cluster   discrete [1, 2]               CTAs (of neighbouring row tiles) that share each B tile: with 2,
                                          each loads half of it and the TMA multicasts it to both, so L2
                                          delivers B once per pair (needs producer 1)
  split     discrete [1, 2, 4, 8]         CTAs of a cluster that split K for one output tile and add
                                          their partial tiles through distributed shared memory: more
                                          CTAs where the output has few tiles, larger tiles (less L2
                                          traffic) where it has many
  slices    discrete [1, 2]               consumer warpgroups of a CTA that slice K: slice j multiplies K
                                          tiles j, j + s, ... into accumulators of its own, so that a small
                                          tile keeps two wgmma sequences in flight (needs producer 1, and
                                          stages in multiples of slices: each stage serves one slice)
  epilogue  discrete [0, 1]               how C is written: 0, each thread stores its sums as 4-byte pairs
                                          (a warp writes 16 bytes of each of 8 rows); 1, staged in shared
                                          memory and written in 16-byte segments, a warp covering whole rows
                                          (a split CTA stages the columns it sums)

The kernel: wgmma_kernel.py; its shared layout and descriptors: wgmma_operand.py.

Only mm and bmm on sm_90 whose N and M divide by 64 and K by the K tile, with both operands K-major (PNT) for
the 8-bit types and TF32 (`applies`); elsewhere tensorcore.py serves (TF32: matmul.py, float32 on the CUDA
cores).  A bmm is its B products in one launch: the grid's rows are every product's row tiles in turn, each
CTA multiplying one tile of one product, whose operands it reads through rank-3 tensor maps (the product
the outermost coordinate); a cluster pairs row tiles of one product, whose B tile it shares.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constraints import Rule, not_dividing
from ..workload import Workload
from .common import MAX_GRID_Y
from .k_split import slice_rules
from .tensorcore import prim_func  # the same computation, for MetaSchedule
from .wgmma_kernel import WARPGROUP, kernel
from .wgmma_operand import WGMMA_TYPES, k_tile, shared_bytes
from .wgmma_rows import row_tiles

if TYPE_CHECKING:
    import tvm

    from ..target import Target

STAGES = list(range(2, 15))
"""Shared stages, up to what the opt-in shared memory of an H100 holds (14 of 64 x 64 tiles): cuBLAS's float16
kernels on the study shapes keep 13 (64 x 64 tiles) and 6 (128 x 128)."""

__all__ = ["applies", "search_space", "upgrade", "default_params", "prim_func", "schedule", "resources", "rules",
           "compile_kernel"]


INT_MAX_COLS = 224  # the widest int8 wgmma (m64n224k32)


def rows_of_tiles(wl: Workload, rows: int) -> int:
    """The grid's rows of block tiles `rows` high: N's row tiles (the last one partial where rows do not divide N),
    for each of bmm's B products."""
    return row_tiles(wl.dims["N"], rows) * wl.dims.get("B", 1)


def takes(wl: Workload) -> bool:
    """Whether the kernel is written for `wl`'s op, types and layout: mm or bmm in a type of WGMMA_TYPES, the 8-bit
    types and TF32 with both operands K-major (PNT)."""
    return wl.op in ("mm", "bmm") and wl.dtype in WGMMA_TYPES and (wl.element.itemsize == 2 or wl.layout == "NT")


def applies(wl: Workload, target: Target | None) -> bool:
    """Whether this template serves `wl` on `target`: `takes(wl)`, N and M in 64s and K in K tiles, a Hopper GPU,
    and a grid of the default config's tiles within `MAX_GRID_Y` rows."""
    d = wl.dims
    return (target is not None and target.kind == "cuda" and target.cuda_arch == 90 and takes(wl)
            and d["N"] % 64 == 0 and d["M"] % 64 == 0 and d["K"] % k_tile(wl.element.itemsize) == 0
            and rows_of_tiles(wl, default_params(wl, True)["rows"]) <= MAX_GRID_Y)


def search_space(wl: Workload) -> dict[str, Any]:
    return {"rows": {"_type": "discrete", "_value": [64, 128, 192]},
            "cols": {"_type": "discrete", "_value": [64, 128, 192, 256]},
            "stages": {"_type": "discrete", "_value": STAGES},
            "in_flight": {"_type": "discrete", "_value": [0, 1]},
            "producer": {"_type": "discrete", "_value": [0, 1]},
            "cluster": {"_type": "discrete", "_value": [1, 2]},
            "split": {"_type": "discrete", "_value": [1, 2, 4, 8]},
            "slices": {"_type": "discrete", "_value": [1, 2]},
            "epilogue": {"_type": "discrete", "_value": [0, 1]}}


def upgrade(wl: Workload, params: dict[str, Any]) -> dict[str, Any]:
    """Recorded knobs as this version takes them, since records outlive knob changes: a config recorded before
    `split` measured the kernel that split 1 builds (each CTA multiplies all of K for its own output tile),
    one recorded before `epilogue` the kernel of epilogue 0 (each thread stores its sums to C itself), one
    recorded before `slices` the kernel of slices 1."""
    return {"split": 1, "epilogue": 0, "slices": 1, **params}


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """128 x 128 tiles, 4 stages, one group in flight, the staged epilogue: 490 TFLOP/s on mm/N512K1024M4096_f16
    (H100; 385 with each thread storing its own sums), the best of a sweep of stages and epilogues there
    (64-row or 64-column tiles where N or M is not a multiple of 128)."""
    return {"rows": 128 if wl.dims["N"] % 128 == 0 else 64, "cols": 128 if wl.dims["M"] % 128 == 0 else 64,
            "stages": 4, "in_flight": 1, "producer": 0, "cluster": 1, "split": 1, "slices": 1,
            "epilogue": 1}


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """One warpgroup per 64 rows and K slice; dynamic shared memory for the stages, the mbarriers and the alignment
    slack; registers: the m64nN accumulators (N/2 floats a thread) and 26 more, 42 with K slices (slice 0 adds
    the others' sums), as ptxas counts them (at most 41 over the 200 sliced configs of two shapes without
    spills; 128 x 128 sliced tiles of 640 threads, capped at 96, spill)."""
    threads = WARPGROUP * (p["rows"] // 64 * p["slices"] + p["producer"])
    return {"threads": threads, "thread_dims": (threads, 1, 1), "shared_bytes": shared_bytes(p, wl.out_itemsize),
            "registers_per_thread": p["cols"] // 2 + (26 if p["slices"] == 1 else 42), "exact_cuda_arch": 90}


def rules(wl: Workload) -> list[Rule]:
    """K tiles and the block tile's columns divide the operands (TMA would pad a partial box with zeros, but the
    loops and the epilogue take whole K tiles and columns; a partial row tile's rows past N are zeros that are
    not stored), a cluster's CTAs pair up row tiles of one matrix, and each split CTA gets as many K tiles, and
    each K slice of a CTA; clusters that share B and K slices need the producer warpgroup; a cluster shares
    B or splits K, not both.  With K slices, each stage serves one slice (an mbarrier wait tells phases apart
    only by their parity: a slice could take the phase of another slice's earlier tile in that stage for its
    own, where TMA copies land out of order; 3 stages, slices 2 faulted or hung on an H100), and the stages
    outnumber what the slices hold (a stage is refilled once its tile's slice has committed `in_flight` tiles
    after it: stages 2, in_flight 1, slices 2 hung).
    tests/test_wgmma_pipeline.py checks both against every interleaving of a model of the pipeline.  A grid
    without clusters has a row for each row tile (of every product of a bmm): at most `MAX_GRID_Y` (a cluster
    grid is launched flat, along x)."""
    d, depth = wl.dims, k_tile(wl.element.itemsize)
    widest = INT_MAX_COLS if wl.element.is_integer else max(search_space(wl)["cols"]["_value"])
    return [Rule(lambda r, c: float(d["K"] % depth != 0), 0.0, grows=False,
                 message=lambda r, c: f"K {d['K']} is not a multiple of the {depth}-deep K tile"),
            Rule(lambda r, c: float(c["cols"] > widest), 0.0, grows=False,
                 message=lambda r, c: f"cols {c['cols']} > {widest}, the widest int8 wgmma"),
            Rule(lambda r, c: not_dividing(c["cluster"], row_tiles(d["N"], c["rows"])), 0.0, grows=False,
                 message=lambda r, c: f"N {d['N']}'s {row_tiles(d['N'], c['rows'])} row tiles of {c['rows']} do not "
                                      f"pair up in clusters of {c['cluster']}"),
            Rule(lambda r, c: float(c["cluster"] > 1 and not c["producer"]), 0.0, grows=False,
                 message=lambda r, c: "a cluster's CTAs release the stages they share through mbarriers: "
                                      "cluster 2 needs producer 1"),
            Rule(lambda r, c: not_dividing(c["cols"], d["M"]), 0.0, grows=False,
                 message=lambda r, c: f"cols {c['cols']} do not divide M {d['M']}"),
            Rule(lambda r, c: not_dividing(c["split"], d["K"] // depth), 0.0, grows=False,
                 message=lambda r, c: f"split {c['split']} does not divide K's {d['K'] // depth} tiles of {depth}"),
            Rule(lambda r, c: not_dividing(c["slices"], d["K"] // depth // c["split"]), 0.0, grows=False,
                 message=lambda r, c: f"slices {c['slices']} do not divide a CTA's {d['K'] // depth // c['split']} K "
                                      f"tiles"),
            *slice_rules(),
            Rule(lambda r, c: float(c["stages"] <= c["in_flight"] * c["slices"]), 0.0, grows=False,
                 message=lambda r, c: f"stages {c['stages']} <= in_flight {c['in_flight']} x slices {c['slices']}: "
                                      f"each slice holds its tile's stage and those of its tiles in flight, and "
                                      f"the next tile's stage would never be released (a deadlock)"),
            Rule(lambda r, c: float(c["cluster"] > 1 and c["split"] > 1), 0.0, grows=False,
                 message=lambda r, c: "a cluster shares B (cluster 2) or splits K (split > 1), not both"),
            Rule(lambda r, c: float(c["cluster"] * c["split"] == 1 and rows_of_tiles(wl, c["rows"]) > MAX_GRID_Y),
                 0.0, grows=False,
                 message=lambda r, c: f"{rows_of_tiles(wl, c['rows'])} row tiles of {c['rows']} rows (N {d['N']}"
                                      f"{' x B ' + str(d['B']) if 'B' in d else ''}) exceed the {MAX_GRID_Y} grid rows "
                                      f"(gridDim.y) CUDA launches: taller tiles, or a cluster (cluster 2 or split > "
                                      f"1, whose grid is flat), fit")]


def compile_kernel(mod: tvm.IRModule, target: Target) -> Any:
    """TVM's TIRx pipeline for sm_90a, the architecture with wgmma (a plain sm_90 build rejects it)."""
    import tvm

    sm_90a = tvm.target.Target({**target.target, "arch": "sm_90a"})
    with sm_90a:  # TVM's CUDA compile callback reads the arch from the current target (build.compile_module)
        return tvm.compile(mod, target=sm_90a, tir_pipeline="tirx")


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    import tvm

    return tvm.IRModule({"main": kernel(wl, p)})

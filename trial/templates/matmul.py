"""Matmul and batched matmul, C[b, n, m] = sum_k A[b, n, k] * B[b, k, m], in NN/NT/TN/TT layouts.

Knobs (the original OpEvo study's, with a split-K part, plus five):
  K       factor [K, 4]  reduction: split (slices reduced by separate thread blocks), outer
                         (shared-memory stage), middle (register stage), inner
  X       factor [N, 4]  rows: block, virtual thread, thread, inner
  Y       factor [M, 4]  columns: block, virtual thread, thread, inner
  B       factor [B, 2]  batches (bmm only): block, inner
  unroll  discrete       auto-unroll budget of the inner loops (0 = off)
  vec     discrete       vector width of the cooperative global-to-shared loads (must divide the
                         contiguous extent of each staged tile and its matrix row: `rules`)
  pipeline discrete      shared-memory stage: 0 single buffer, 1 double buffer (software pipeline:
                         the next K tile is loaded while the current one is used), 2, 3, 4 buffers
                         filled by asynchronous copies (cp.async, CUDA sm_80 and newer)
  kmajor  discrete       1: an operand whose rows run along K in memory (A in NN/NT, B in NT/TT) is
                         transposed as it is staged, so its shared tile is K-major like the other's
                         (only where the layout has such an operand)
  pad     discrete       words added to each row of both shared tiles (bank conflicts)

GPU: the classic two-level tiling: each thread block owns an X[1:]-by-Y[1:] tile of C, stages
K[2]*K[3]-deep slices of A and B in shared memory (loaded cooperatively, coalesced and vectorised)
and K[3]-deep fragments in registers, and accumulates X[1]*X[3]-by-Y[1]*Y[3] values per thread.
Split-K (K[0] > 1) gives a long reduction over few output tiles more thread blocks: each reduces one
K/K[0] slice into a partial result (TensorIR's rfactor), and a second kernel sums the K[0] partials.
Register fragments are read from shared memory at every K step, so their layout there decides the
kernel's shared-memory traffic.  In a K-major tile a thread's X[3] rows (Y[3] columns) lie side by side:
nvcc reads them with vector loads (LDS.64/128), and the threads of a warp that share a K step read
distinct words of one row.  In a row-major tile (rows along K) they lie a tile row apart: scalar loads,
and rows whose length is a multiple of 32 words put them in one bank (`pad` shifts them apart).  Hand-
written SGEMMs transpose A as they store it for this reason (Boehm's CUDA matmul worklog, kernel 6).
The transposing copy reads global memory in `vec`-wide vectors and stores elements; with asynchronous
copies, which move whole vectors to contiguous shared words, it copies element by element.
CPU: the same tiles and split; outer tiles run in parallel, the Y[3] columns are vectorised;
`pipeline`, `vec`, `kmajor` and `pad` have no CPU meaning.  A block whose shared tiles exceed the
device's static limit keeps them in dynamic shared memory (`shared_scope`), up to the device's opt-in
maximum.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..constraints import Rule
from ..workload import Workload
from .common import (PIPELINE_DEPTHS, SUM_THREADS, cooperative_fetch, factor_knob, greedy_split, loop_depth,
                     pipeline, pipeline_buffers, shared_scope, unroll)

if TYPE_CHECKING:
    import tvm
    from tvm import s_tir
    from tvm.s_tir.schedule import SBlockRV

    from ..target import Target

UNROLL_STEPS = [0, 16, 64, 512, 1500]
VECTOR_WIDTHS = [1, 2, 4]
KMAJOR = [0, 1]
PADS = [0, 4]
"""Words of padding per shared row: 4 keeps rows 16-byte aligned for vectors."""


def k_contiguous(wl: Workload) -> tuple[bool, bool]:
    """Whether A's and B's rows run along K in memory (A[n, k] in N? layouts, B[m, k] in ?T)."""
    return wl.layout[0] == "N", wl.layout[1] == "T"


def search_space(wl: Workload) -> dict[str, Any]:
    d = wl.dims
    space = {"K": factor_knob(d["K"], 4), "X": factor_knob(d["N"], 4), "Y": factor_knob(d["M"], 4)}
    if wl.op == "bmm":
        space["B"] = factor_knob(d["B"], 2)
    space["unroll"] = {"_type": "discrete", "_value": UNROLL_STEPS}
    space["vec"] = {"_type": "discrete", "_value": VECTOR_WIDTHS}
    space["pipeline"] = {"_type": "discrete", "_value": PIPELINE_DEPTHS}
    if any(k_contiguous(wl)):
        space["kmajor"] = {"_type": "discrete", "_value": KMAJOR}
    space["pad"] = {"_type": "discrete", "_value": PADS}
    return space


def upgrade(wl: Workload, params: dict[str, Any]) -> dict[str, Any]:
    """Recorded knobs as this version takes them, since records outlive knob changes: a config recorded
    before `kmajor` and `pad` measured the kernel they build at 0 (no transposed, no padded tile)."""
    added = [name for name in ("kmajor", "pad") if name in search_space(wl) and name not in params]
    return {**params, **dict.fromkeys(added, 0)}


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """A hand-picked config: 128x128 block tiles of 16x16 threads on GPUs, 4x16 register tiles on CPUs."""
    d = wl.dims
    if gpu:
        params = {"K": [1, *greedy_split(d["K"], [8, 1])], "X": greedy_split(d["N"], [2, 16, 4]),
                  "Y": greedy_split(d["M"], [2, 16, 4]), "unroll": 512, "vec": 4, "pipeline": 1, "kmajor": 1,
                  "pad": 4}
    else:
        params = {"K": [1, *greedy_split(d["K"], [4, 4])], "X": greedy_split(d["N"], [1, 8, 4]),
                  "Y": greedy_split(d["M"], [1, 4, 16]), "unroll": 16, "vec": 1, "pipeline": 0, "kmajor": 0,
                  "pad": 0}
    if wl.op == "bmm":
        params["B"] = greedy_split(d["B"], [1])
    return {k: params[k] for k in search_space(wl)}


def prim_func(wl: Workload) -> tvm.tirx.PrimFunc:
    from tvm import te

    d = wl.dims
    a_shape, b_shape = wl.input_shapes
    A = te.placeholder(a_shape, wl.element.tvm, name="A")
    B = te.placeholder(b_shape, wl.element.tvm, name="B")
    k = te.reduce_axis((0, d["K"]), name="k")
    trans_a, trans_b = (c == "T" for c in wl.layout)

    def body(*idx):
        *batch, i, j = idx
        a = A[(*batch, k, i)] if trans_a else A[(*batch, i, k)]
        b = B[(*batch, j, k)] if trans_b else B[(*batch, k, j)]
        return te.sum(a * b, axis=k)

    C = te.compute(wl.output_shape, body, name="C")
    return te.create_prim_func([A, B, C])


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """What one thread block of the GPU schedule uses: threads, shared bytes, registers per thread.

    Registers: the accumulators of one batch (the write-back follows each batch), the fragments of all
    K[3] steps (where the K[3] loop is not unrolled, nvcc keeps deeper fragment arrays in local memory)
    and 16 for addresses and indices: an estimate, which ptxas's own count (tests/nvrtc.py reads it) may
    exceed or undercut."""
    X, Y, K = p["X"], p["Y"], p["K"]
    item = wl.element.itemsize
    tiles = sum(rows * (length + p["pad"]) for rows, length in shared_tiles(wl, p))
    shared = tiles * item * pipeline_buffers(p["pipeline"])
    accumulators = X[1] * X[3] * Y[1] * Y[3]  # one batch's: a thread sums its batches one after another
    fragments = (X[1] * X[3] + Y[1] * Y[3]) * K[3]
    return {"threads": X[2] * Y[2], "thread_dims": (Y[2], X[2], 1), "shared_bytes": shared,
            "registers_per_thread": accumulators + fragments + 16, "async_copy": p["pipeline"] >= 2}


def transposed(wl: Workload, p: dict[str, Any]) -> tuple[bool, bool]:
    """Which operands the copy to shared memory transposes (`kmajor`)."""
    return tuple(along_k and bool(p.get("kmajor")) for along_k in k_contiguous(wl))


def shared_tiles(wl: Workload, p: dict[str, Any]) -> list[tuple[int, int]]:
    """(rows, row length) of A's and B's shared tiles, before padding."""
    k_tile = p["K"][2] * p["K"][3]
    tiles = []
    for along_k, moved, extent in zip(k_contiguous(wl), transposed(wl, p), (p["X"], p["Y"])):
        other = math.prod(extent[1:])
        tiles.append((other, k_tile) if along_k and not moved else (k_tile, other))
    return tiles


def rules(wl: Workload) -> list[Rule]:
    """Vector loads need whole, aligned vectors: `vec` must divide the contiguous extent of each operand's
    staged tile and the matrix row it is cut from; otherwise a vector straddles two rows of the tile or
    starts off its alignment (`cudaErrorMisalignedAddress`)."""
    d = wl.dims

    def extents(c: dict[str, Any]) -> dict[str, tuple[int, int]]:
        k_tile = c["K"][2] * c["K"][3]
        a = (math.prod(c["X"][1:]), d["N"]) if wl.layout[0] == "T" else (k_tile, d["K"])
        b = (k_tile, d["K"]) if wl.layout[1] == "T" else (math.prod(c["Y"][1:]), d["M"])
        return {"A": a, "B": b}

    def misfits(c: dict[str, Any]) -> list[str]:
        return [f"vec {c['vec']} does not divide {name}'s contiguous tile extent {tile} and row of {row}"
                for name, (tile, row) in extents(c).items() if tile % c["vec"] or row % c["vec"]]

    return [Rule(lambda r, c: float(bool(misfits(c))), 0.0, lambda r, c: "; ".join(misfits(c)), grows=False)]


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(wl))
    schedule_product(sch, sch.get_sblock("C"), wl, p, target)
    return sch.mod


def schedule_product(sch: s_tir.Schedule, C: SBlockRV, wl: Workload, p: dict[str, Any],
                     target: Target) -> SBlockRV:
    """Schedule block `C` of `sch`, a product of `wl`'s shape (loops [batch,] rows, columns, reduction; it
    reads A, then B), with knobs `p`: this template's kernel, and the batched product of another's
    (conv2d_winograd.py).  Returns the block that writes a thread's sums back from its registers."""
    gpu = target.is_gpu
    batch = wl.op == "bmm"
    *b, i, j, k = sch.get_loops(C)
    outer, inner = ([loop] for loop in sch.split(b[0], p["B"])) if batch else ([], [])
    i0, i1, i2, i3 = sch.split(i, p["X"])
    j0, j1, j2, j3 = sch.split(j, p["Y"])
    ks, k0, k1, k2 = sch.split(k, p["K"])
    split = p["K"][0] > 1
    grid = [*outer, ks] if split else outer
    sch.reorder(*grid, i0, j0, i1, j1, i2, j2, *inner, *([] if split else [ks]), k0, k1, k2, i3, j3)
    main = C
    if split:
        main = sch.rfactor(ks, 0)  # block C_rf: each K slice's partial sum; C: their sum
        _sum_partials(sch, C, batch, gpu)
        loops, n = sch.get_loops(main), len(grid)  # rfactor made new loops
        grid, (i0, j0, i1, j1, i2, j2), inner = loops[:n], loops[n:n + 6], loops[n + 6:n + 6 + len(inner)]
        k0, k1, _, _, j3 = sch.get_loops(main)[-5:]
    # the accumulators of one batch at a time: over a thread's batch loop, which TIR leaves rolled, they
    # would be indexed by the batch at run time, and nvcc puts such an array in local memory
    CL = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(CL, inner[0] if inner else j2)
    if gpu:
        scope = shared_scope(target, resources(wl, p)["shared_bytes"])
        _gpu(sch, wl, p, main, grid, (i0, j0, i1, j1, i2, j2), (k0, k1), scope)
    else:
        first = sch.fuse(*grid, i0, j0)
        sch.parallel(first)
        unroll(sch, first, p["unroll"])
        if p["Y"][3] > 1:
            sch.vectorize(j3)
            sch.vectorize(sch.get_loops(CL)[-1])
    sch.decompose_reduction(main, k0 if split else ks)
    return CL


def _sum_partials(sch: s_tir.Schedule, C, batch: bool, gpu: bool) -> None:
    """Schedule C = sum over slices of the partials: output elements in row-major order, slices inner."""
    loops = sch.get_loops(C)  # [b0,] slice, i0, j0, i1, j1, i2, j2, [b1,] i3, j3
    o = int(batch)
    rows = [loops[o + 1], loops[o + 3], loops[o + 5], loops[2 * o + 7]]
    cols = [loops[o + 2], loops[o + 4], loops[o + 6], loops[2 * o + 8]]
    batches = [loops[0], loops[8]] if batch else []
    sch.reorder(*batches, *rows, *cols, loops[o])
    element = sch.fuse(*batches, *rows, *cols)
    if gpu:
        block, thread = sch.split(element, [None, SUM_THREADS])
        sch.bind(block, "blockIdx.x")
        sch.bind(thread, "threadIdx.x")
        sch.reverse_compute_at(sch.cache_write(C, 0, "local"), thread)
    else:
        sch.parallel(sch.split(element, [None, 64])[0])


def _gpu(sch: s_tir.Schedule, wl: Workload, p: dict[str, Any], main, grid, tiles, ks, scope: str) -> None:
    i0, j0, i1, j1, i2, j2 = tiles
    k0, k1 = ks
    if grid:
        sch.bind(sch.fuse(*grid) if len(grid) > 1 else grid[0], "blockIdx.z")
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "vthread.y")
    sch.bind(j1, "vthread.x")
    sch.bind(i2, "threadIdx.y")
    sch.bind(j2, "threadIdx.x")
    depth = loop_depth(sch, main, k0)
    threads = [("threadIdx.y", p["X"][2]), ("threadIdx.x", p["Y"][2])]
    asynchronous = p["pipeline"] >= 2
    for index, moved, (_, length) in zip((0, 1), transposed(wl, p), shared_tiles(wl, p)):
        shared = sch.cache_read(main, index, scope)
        sch.compute_at(shared, k0)
        if moved:
            sch.transform_layout(shared, ("write", 0), lambda *x: (*x[:-2], x[-1], x[-2]))
        if p["pad"]:  # the row stride, once TVM has cut the buffer down to the tile: length + pad
            sch.storage_align(shared, 0, axis=-2, factor=length + p["pad"], offset=0)
        cooperative_fetch(sch, shared, depth, threads, 1 if moved and asynchronous else p["vec"])
    for index in (0, 1):
        sch.compute_at(sch.cache_read(main, index, "local"), k1)
    pipeline(sch, k0, p["pipeline"])
    unroll(sch, sch.get_loops(main)[0], p["unroll"])

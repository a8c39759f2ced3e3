"""Matmul and batched matmul on tensor cores: float16, bfloat16, int8 or float8 e4m3 inputs, float32 or int32
accumulation (trial/dtypes.py), in the layouts trial/workload.py allows for the type.

Knobs (in 16x16 output tiles, and in k-steps of one MMA: 16 products for 16-bit types, 32 for 8-bit types):
  X        factor [N/16, 3]  rows: block, warp, tiles per warp
  Y        factor [M/16, 3]  columns: block, warp, tiles per warp
  K        factor [K/k, 4]   reduction: split (slices reduced by separate thread blocks), shared-memory
                             stage, register stage, k-steps per register load
  pad      discrete [0, 1]   1 pads each shared row to a stride of 16 bytes past a multiple of 64, so the
                             eight 16-byte rows one ldmatrix reads fall in different banks
  unroll   discrete          auto-unroll budget of the loops inside a thread block (0 = off)
  pipeline discrete          as in matmul.py: 0 single buffer, 1 double buffer, 2-4 cp.async buffers

GPU (TVM's MMA intrinsics, tvm.s_tir.tensor_intrin.cuda): each thread block owns a 16*X[1]*X[2] by
16*Y[1]*Y[2] tile of C and has X[1]*Y[1] warps; each warp keeps X[2]-by-Y[2] 16x16 accumulators in
registers (mma.sync m16n8k16 for the 16-bit types, m16n8k32 for 8-bit), loads its fragments from shared memory
with ldmatrix, and at the end stores its accumulators to a shared copy of the block's C tile, which all
threads then write to C in vectors of four (a fragment's own layout would give 4-byte stores, 8 bytes
apart per row), rounding float32 sums to the 16-bit output type on the way where there is one.  The
block's A and B tiles are copied to shared memory with 16-byte vectors spread over all its threads.
Batches (bmm) go to blockIdx.z.
Split-K (K[0] > 1) is for long reductions over few output tiles (mm/N512K4096M1024: 32 tiles of 128x128
for 132 SMs): each of K[0] slices of the reduction is its own thread block, writing a partial sum in the
accumulation type (TensorIR's rfactor), and a second kernel adds the partials up and writes C, rounded
to the 16-bit output type where there is one.
CPU: a plain schedule over 16x16 tiles in the same types, with the same split-K partials (the other
knobs have no CPU meaning), so that the results are verified without a GPU.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constraints import Rule
from ..workload import MAX_GRID_Z, Workload
from .common import (PIPELINE_DEPTHS, cooperative_fetch, factor_knob, greedy_split, loop_depth, pipeline,
                     pipeline_buffers, shared_scope, split_k, sum_partials, unroll)
from .matmul import UNROLL_STEPS
from .mma_intrinsics import intrinsics

if TYPE_CHECKING:
    import tvm
    from tvm import s_tir

    from ..target import Target

TILE = 16  # rows and columns of one MMA output tile
EPILOGUE_SCOPE = "shared.dyn"  # where the accumulators are staged (TVM's MMA stores reach no static shared)
WARP = 32
VECTOR_BYTES = 16  # one global-to-shared copy per thread: a 16-byte vector (cp.async's widest)
BANK_PERIOD, ROW_SKEW = 64, 16  # padded shared rows start 16 bytes past a multiple of 64 bytes


def search_space(wl: Workload) -> dict[str, Any]:
    d = wl.dims
    return {"K": factor_knob(d["K"] // wl.element.mma_k, 4), "X": factor_knob(d["N"] // TILE, 3),
            "Y": factor_knob(d["M"] // TILE, 3), "pad": {"_type": "discrete", "_value": [0, 1]},
            "unroll": {"_type": "discrete", "_value": UNROLL_STEPS},
            "pipeline": {"_type": "discrete", "_value": PIPELINE_DEPTHS}}


def upgrade(wl: Workload, params: dict[str, Any]) -> dict[str, Any]:
    """Recorded knobs as this version takes them, since records outlive knob changes: a K of three parts was
    recorded before split-K, and K[0] = 1 schedules the rest as those three were (no rfactor, the same splits)."""
    k = params.get("K")
    return {**params, "K": [1, *k]} if isinstance(k, list) and len(k) == 3 else params


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """A hand-picked config: 64x64 block tiles of 2x2 warps, 32x32 per warp, two k-steps per register
    load, four cp.async buffers (the best of a handful tried on an H100 for mm/N512K1024M1024_f16)."""
    d = wl.dims
    return {"K": [1, *greedy_split(d["K"] // wl.element.mma_k, [1, 2])], "X": greedy_split(d["N"] // TILE, [2, 2]),
            "Y": greedy_split(d["M"] // TILE, [2, 2]), "pad": 1, "unroll": 0, "pipeline": 4 if gpu else 0}


def prim_func(wl: Workload) -> tvm.tirx.PrimFunc:
    from tvm import te

    a_shape, b_shape = wl.input_shapes
    A = te.placeholder(a_shape, wl.element.tvm, name="A")
    B = te.placeholder(b_shape, wl.element.tvm, name="B")
    k = te.reduce_axis((0, wl.dims["K"]), name="k")
    trans_a, trans_b = (c == "T" for c in wl.layout)

    def body(*idx):
        *batch, i, j = idx
        a = A[(*batch, k, i)] if trans_a else A[(*batch, i, k)]
        b = B[(*batch, j, k)] if trans_b else B[(*batch, k, j)]
        return te.sum(a.astype(wl.element.acc) * b.astype(wl.element.acc), axis=k)

    C = te.compute(wl.output_shape, body, name="C")
    if wl.element.rounds_output:  # 16-bit out: the float32 sums are rounded as they are written
        C = te.compute(wl.output_shape, lambda *i: C[i].astype(wl.out_dtype), name="rounded")
    return te.create_prim_func([A, B, C])


def _tiles(wl: Workload, p: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(rows, contiguous columns) of each operand's shared tile, as stored in memory."""
    k_tile = wl.element.mma_k * p["K"][2] * p["K"][3]
    rows, cols = TILE * p["X"][1] * p["X"][2], TILE * p["Y"][1] * p["Y"][2]
    a = (k_tile, rows) if wl.layout[0] == "T" else (rows, k_tile)
    b = (cols, k_tile) if wl.layout[1] == "T" else (k_tile, cols)
    return {"A": a, "B": b}


def _skew(itemsize: int) -> tuple[int, int]:
    """storage_align's (factor, offset) in elements of `itemsize` bytes: a padded row stride is `offset`
    past a multiple of `factor`."""
    return BANK_PERIOD // itemsize, ROW_SKEW // itemsize


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """What one thread block uses: warps of 32 threads, padded shared tiles, fragment registers.

    Shared bytes: the input tiles (times the pipeline's buffers) plus the accumulator tile, an upper bound
    where both live in dynamic shared memory, whose allocations TVM may overlap (they are not live together).
    """
    warps = p["X"][1] * p["Y"][1]

    def padded(rows: int, cols: int, itemsize: int) -> int:
        factor, offset = _skew(itemsize) if p["pad"] else (1, 0)
        return rows * (cols + (offset - cols) % factor) * itemsize

    inputs = sum(padded(r, c, wl.element.itemsize) for r, c in _tiles(wl, p).values())
    epilogue = padded(TILE * p["X"][1] * p["X"][2], TILE * p["Y"][1] * p["Y"][2], wl.element.acc_itemsize)
    fragments = 4 * p["K"][3] * (p["X"][2] + p["Y"][2])  # a 16x16 (or 16x32 8-bit) fragment: 4 per thread
    return {"threads": WARP * warps, "thread_dims": (WARP, warps, 1),
            "shared_bytes": inputs * pipeline_buffers(p["pipeline"]) + epilogue,
            "registers_per_thread": 8 * p["X"][2] * p["Y"][2] + fragments + 24,
            "async_copy": p["pipeline"] >= 2, "min_cuda_arch": wl.element.min_arch}


def rules(wl: Workload) -> list[Rule]:
    """Each shared tile is copied in whole 16-byte vectors by every thread of the block alike; batches and
    K slices share blockIdx.z, whose extent CUDA limits."""
    vec, batches = VECTOR_BYTES // wl.element.itemsize, wl.dims.get("B", 1)

    def misfits(r: dict[str, Any], c: dict[str, Any]) -> list[str]:
        step = r["threads"] * vec
        return [f"{name}'s {rows}x{cols} shared tile is not a whole number of {r['threads']} threads x {vec} elements"
                for name, (rows, cols) in _tiles(wl, c).items() if (rows * cols) % step]

    return [Rule(lambda r, c: float(bool(misfits(r, c))), 0.0, lambda r, c: "; ".join(misfits(r, c)), grows=False),
            Rule(lambda r, c: batches * c["K"][0], MAX_GRID_Z, grows=False,  # K[0] is the outermost part
                 message=lambda r, c: f"{batches} batches x {c['K'][0]} K slices = {batches * c['K'][0]} thread "
                                      f"blocks along blockIdx.z > {MAX_GRID_Z}")]


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(wl))
    split = p["K"][0] > 1
    main = split_k(sch, p["K"][0]) if split else sch.get_sblock("C")
    if target.is_gpu:
        _gpu(sch, wl, p, main, split, shared_scope(target, resources(wl, p)["shared_bytes"]))
    else:
        _cpu(sch, wl, main, split)
    if split:  # last: the main kernel's compute_at needs the sum's loops untouched
        sum_partials(sch, wl.element.rounds_output, target.is_gpu)
    return sch.mod


def _cpu(sch: s_tir.Schedule, wl: Workload, main, split: bool) -> None:
    *b, i, j, k = sch.get_loops(main)
    i0, i1 = sch.split(i, [None, TILE])
    j0, j1 = sch.split(j, [None, TILE])
    sch.reorder(i0, j0, k, i1, j1)
    tile = sch.fuse(*b, i0, j0)
    sch.parallel(tile)
    sch.vectorize(j1)
    if wl.element.rounds_output and not split:
        rounded = sch.get_sblock("rounded")
        sch.reverse_compute_at(rounded, tile)
        sch.vectorize(sch.get_loops(rounded)[-1])
    sch.decompose_reduction(main, k)


def _fragment_map(rows: int, cols: int):
    """The index map from a warp buffer of (rows x cols)-element fragments to (thread, register) pairs,
    over a buffer's last two axes (the ones before, batch and K slice, stay as they are)."""
    from tvm.s_tir.tensor_intrin import cuda

    layout = {(16, 16): cuda.shared_16x16_to_ldmatrix_32x8_layout, (16, 32): cuda.shared_16x32_to_ldmatrix_32x16_layout,
              (32, 16): cuda.shared_32x16_to_ldmatrix_32x16_layout}[rows, cols]
    return lambda *idx: (*idx[:-2], idx[-2] // rows, idx[-1] // cols, *layout(idx[-2] % rows, idx[-1] % cols))


def _gpu(sch: s_tir.Schedule, wl: Workload, p: dict[str, Any], main, split: bool, scope: str) -> None:
    e = wl.element
    trans_a, trans_b = (c == "T" for c in wl.layout)
    intrins = intrinsics(e, scope, EPILOGUE_SCOPE, trans_a, trans_b)
    *grid, i, j, k = sch.get_loops(main)  # grid: the batch and the K slice, each where there is one
    i, i_tc = sch.split(i, [None, TILE])
    j, j_tc = sch.split(j, [None, TILE])
    k, k_tc = sch.split(k, [None, e.mma_k])
    sch.reorder(i, j, k, i_tc, j_tc, k_tc)
    outer = sch.blockize(i_tc)  # one MMA tile per iteration of the loops above
    i0, i2, i3 = sch.split(i, p["X"])
    j0, j2, j3 = sch.split(j, p["Y"])
    k0, k1, k2 = sch.split(k, p["K"][1:])
    sch.reorder(i0, j0, i2, j2, k0, k1, i3, j3, k2)
    if grid:
        sch.bind(sch.fuse(*grid) if len(grid) > 1 else grid[0], "blockIdx.z")
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    warp = sch.fuse(i2, j2)
    sch.bind(warp, "threadIdx.y")
    threads = [("threadIdx.y", p["X"][1] * p["Y"][1]), ("threadIdx.x", WARP)]
    for index in (0, 1):
        _fetch(sch, wl, sch.cache_read(outer, index, scope), k0, threads, p["pad"])
    fragments = {"A": (e.mma_k, TILE) if trans_a else (TILE, e.mma_k),
                 "B": (TILE, e.mma_k) if trans_b else (e.mma_k, TILE)}
    loads = {}
    for index, (name, (rows, cols)) in enumerate(fragments.items()):
        frag = sch.cache_read(outer, index, "warp")
        sch.compute_at(frag, k1)
        loads[f"load_{name.lower()}"] = _tile_loops(sch, frag, rows, cols)
        sch.transform_layout(frag, ("write", 0), _fragment_map(rows, cols))
    acc = sch.cache_write(outer, 0, "warp")
    sch.reverse_compute_at(acc, warp)
    if e.rounds_output and not split:  # the warps store their accumulators to shared memory; then all
        sch.set_scope(acc, 0, EPILOGUE_SCOPE)  # threads copy the block's tile out in vectors, rounding it
        staged = sch.get_sblock("rounded")
    else:
        staged = sch.cache_write(acc, 0, EPILOGUE_SCOPE)
    sch.reverse_compute_at(staged, j0)
    cooperative_fetch(sch, staged, loop_depth(sch, staged, j0), threads, VECTOR_BYTES // e.acc_itemsize)
    store, acc_name = _tile_loops(sch, acc, TILE, TILE), sch.get(acc).name_hint
    store_tiles = sch.get_loops(acc)[-4]
    sch.transform_layout(acc, ("read", 0), _fragment_map(TILE, TILE))
    sch.decompose_reduction(outer, k0)
    init = sch.get_sblock(f"{sch.get(main).name_hint}_init")
    for intrin, loop in {**loads, "compute": sch.get_loops(main)[-3], "init": sch.get_loops(init)[-2],
                         "store": store}.items():
        sch.tensorize(loop, intrins[intrin])
    if p["pad"]:  # after tensorize, which replaces the block that would carry the alignment
        sch.storage_align(sch.get_sblock(f"{acc_name}_o"), 0, -2, *_skew(e.acc_itemsize))
    pipeline(sch, k0, p["pipeline"])
    # the loops that index fragments are unrolled by nvcc (#pragma unroll), not by TIR: TIR's unrolling
    # folds a tile's and a register's offsets into one constant (256 + 4), behind which TVM 0.27's
    # LowerWarpMemory no longer separates the thread's share, leaving a thread-dependent index into the
    # fragment array (local memory instead of registers)
    unroll(sch, k1, p["unroll"], explicit=False)
    unroll(sch, store_tiles, UNROLL_STEPS[-1], explicit=False)


def _fetch(sch: s_tir.Schedule, wl: Workload, block, k0, threads: list[tuple[str, int]], pad: int) -> None:
    """Copy a shared tile at the top of `k0` with 16-byte vectors, all threads taking consecutive ones in
    turn; with `pad`, skew its rows across the banks."""
    sch.compute_at(block, k0)
    cooperative_fetch(sch, block, loop_depth(sch, block, k0), threads, VECTOR_BYTES // wl.element.itemsize)
    if pad:
        sch.storage_align(block, 0, -2, *_skew(wl.element.itemsize))


def _tile_loops(sch: s_tir.Schedule, block, rows: int, cols: int):
    """Split `block`'s last two loops into (rows x cols) tiles; the loop that one tile's copy starts at."""
    i, j = sch.get_loops(block)[-2:]
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, cols])
    sch.reorder(i0, j0, i1, j1)
    return i1


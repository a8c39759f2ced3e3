"""Scheduling steps and knob helpers shared by the operator templates."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tvm import s_tir
    from tvm.s_tir.schedule import SBlockRV

    from ..target import Target

MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y, which a grid without clusters gives its row tiles


def factor_knob(length: int, parts: int) -> dict[str, Any]:
    return {"_type": "factor", "_value": [length, parts]}


def greedy_split(length: int, inner_wishes: list[int]) -> list[int]:
    """Split `length` into 1 + len(inner_wishes) exact factors, outermost first.

    Inner parts are filled innermost first, each the largest divisor of what remains that does not
    exceed its wish; the outermost part takes the rest.  Used to derive hand-picked defaults for any shape.
    """
    rest, inner = length, []
    for wish in reversed(inner_wishes):
        f = max(d for d in range(1, min(wish, rest) + 1) if rest % d == 0)
        inner.append(f)
        rest //= f
    return [rest, *reversed(inner)]


def unroll(sch: s_tir.Schedule, loop, max_step: int, explicit: bool = True) -> None:
    """Ask TVM to unroll loops below `loop` up to `max_step` iterations (0 leaves loops alone)."""
    if max_step:
        sch.annotate(loop, "pragma_auto_unroll_max_step", max_step)
        sch.annotate(loop, "pragma_unroll_explicit", int(explicit))


def cooperative_fetch(sch: s_tir.Schedule, block, depth: int, threads: list[tuple[str, int]],
                      vec: int = 1) -> None:
    """Spread the copy done by `block` (its loops below the first `depth`) over the block's threads.

    Consecutive threads take consecutive elements of the copied tile, `vec` elements at a time,
    so global loads coalesce and can use vector instructions.
    """
    loops = sch.get_loops(block)[depth:]
    if not loops:  # a one-element tile: compute_at left the copy no loop of its own
        loops = [sch.add_unit_loop(block)]
    fused = sch.fuse(*loops)
    factors = [None] + [n for _, n in threads] + ([vec] if vec > 1 else [])
    parts = sch.split(fused, factors)
    for loop, (axis, _) in zip(parts[1:], threads):
        sch.bind(loop, axis)
    if vec > 1:
        sch.vectorize(parts[-1])


SUM_THREADS = 256  # threads per block of the kernel that sums split-K partials
SUM_LANES = 4  # outputs per thread of the tensor-core template's sum: 16-byte loads of float32 or int32 partials


def split_k(sch: s_tir.Schedule, slices: int) -> SBlockRV:
    """Reduce K in `slices` slices into partial sums, which C then adds up; the block of the partial sums
    (C_rf), its loops batch, slice, rows, columns, reduction."""
    *_, k = sch.get_loops(sch.get_sblock("C"))
    partials = sch.rfactor(sch.split(k, [slices, None])[0], 0)
    *_, i, j, ks, _ = sch.get_loops(partials)
    sch.reorder(ks, i, j)  # the slice from between the output's loops and the reduction's to the outside
    return partials


def sum_partials(sch: s_tir.Schedule, rounded: bool, gpu: bool) -> None:
    """Schedule C, the sum of `split_k`'s partials: a vector of outputs per thread (of a second kernel on
    GPUs), whose consumer block "rounded" (where `rounded`) narrows the sums as it writes them.  The
    output's rows must be whole vectors (the tensor-core template's are of 16 columns)."""
    C = sch.get_sblock("C")
    *outer, last, ks = sch.get_loops(C)
    # lanes split off before fusing, so a thread's outputs are one row's: fused first, TVM's buffer
    # compaction could not bound them past a row of 1,024 outputs or a batch, and left each thread a
    # local array spanning the output (16 MB for mm/N512K1024M4096: a kernel that cannot launch)
    last, lanes = sch.split(last, [None, SUM_LANES])
    element = sch.fuse(*outer, last)
    if gpu:
        blocks, element = sch.split(element, [None, SUM_THREADS])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(element, "threadIdx.x")
    else:
        sch.parallel(element)
    sch.reorder(ks, lanes)
    if rounded:
        sch.set_scope(C, 0, "local")
        written = sch.get_sblock("rounded")
    else:
        written = sch.cache_write(C, 0, "local")
    sch.reverse_compute_at(written, element)
    for block in (C, written):  # C keeps its init (vectorize needs it), lowered to a branch on the slice
        sch.vectorize(sch.get_loops(block)[-1])


PIPELINE_DEPTHS = [0, 1, 2, 3, 4]
_BUFFERS = {0: 1, 1: 2, 2: 2, 3: 3, 4: 4}


def pipeline_buffers(depth: int) -> int:
    """How many copies of each shared tile the `pipeline` knob's `depth` keeps."""
    return _BUFFERS[depth]


def pipeline(sch: s_tir.Schedule, loop, depth: int) -> None:
    """Pipeline the shared-memory copies at the top of `loop`'s body (depth 0 leaves them single).

    The body must be the two copy blocks followed by the compute that reads them.  TVM's software
    pipelining issues later iterations' copies before iteration i's compute, so global-memory latency
    hides behind arithmetic.  Depth 1 double-buffers with ordinary loads; from depth 2 the copies are
    asynchronous (cp.async, which also skips the round trip through registers) into 2, 3 or 4 buffers,
    so up to three K tiles are in flight while one is used.
    """
    if depth:
        sch.annotate(loop, "software_pipeline_stage", [0, 0, pipeline_buffers(depth) - 1])
        sch.annotate(loop, "software_pipeline_order", [0, 1, 2])
        if depth >= 2:
            sch.annotate(loop, "software_pipeline_async_stages", [0])


def shared_scope(target: Target, shared_bytes: int) -> str:
    """Where a block's shared tiles live: beyond the device's static limit (48 KiB on CUDA) a block
    must use dynamic shared memory, which TVM's CUDA runtime opts into at launch up to the device's
    per-block maximum (227 KiB on an H100); below it, static shared memory as before."""
    static = target.limits.max_shared_memory_per_block
    return "shared.dyn" if target.kind == "cuda" and shared_bytes > static else "shared"


def loop_depth(sch: s_tir.Schedule, block, loop) -> int:
    """How many loops enclose `block` down to and including `loop`."""
    wanted = sch.get(loop)
    return next(n for n, found in enumerate(sch.get_loops(block), 1) if sch.get(found).same_as(wanted))


def stage_inputs(sch: s_tir.Schedule, block: SBlockRV, loop, threads: list[tuple[str, int]], scope: str,
                 depth: int, padded: bool) -> None:
    """Stage both inputs of `block` (a convolution) in shared memory (`scope`) at the top of `loop`, each copy
    spread over the block's `threads`, the stage "pad" (where `padded`) folded into the copy, whose tile is
    then exact, and the copies pipelined `depth` deep (`pipeline`)."""
    for index in (0, 1):
        shared = sch.cache_read(block, index, scope)
        sch.compute_at(shared, loop)
        cooperative_fetch(sch, shared, loop_depth(sch, block, loop), threads)
    if padded:
        sch.compute_inline(sch.get_sblock("pad"))
    pipeline(sch, loop, depth)


def bind_tiles(sch: s_tir.Schedule, loops: list[tuple[Any, Any, Any]],
               tiles: list[list[int]]) -> tuple[Any, list[tuple[str, int]]]:
    """Bind the outer three levels of a direct convolution's four tiled output axes (`loops`, each axis's
    levels 0-2; `tiles`, their split factors): the first two axes fused on z, the others on y and x, level 0
    to blocks, 1 to virtual threads, 2 to threads.  Returns the fused block loop and the block's threads (the
    axes and extents `cooperative_fetch` spreads a copy over)."""
    fused = []
    for level, kind in enumerate(("blockIdx", "vthread", "threadIdx")):
        fused.append(sch.fuse(loops[0][level], loops[1][level]))
        for loop, axis in ((fused[-1], "z"), (loops[2][level], "y"), (loops[3][level], "x")):
            sch.bind(loop, f"{kind}.{axis}")
    threads = [("threadIdx.z", tiles[0][2] * tiles[1][2]), ("threadIdx.y", tiles[2][2]), ("threadIdx.x", tiles[3][2])]
    return fused[0], threads

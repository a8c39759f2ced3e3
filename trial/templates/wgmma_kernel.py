"""The TIRx kernel of the wgmma template (wgmma.py declares its knobs, rules and resources; wgmma_operand.py
how each operand is laid out in shared memory and described).

A CTA's consumer warpgroups may also slice K (`slices` s: slice j multiplies K tiles j, j + s, ...), each
slice with accumulators of its own, so that s wgmma sequences of the same tile are in flight at once; after
the loop, slices 1.. hand their sums to slice 0 through shared memory.

A cluster of CTAs either shares B (`cluster` 2: each loads half of every B box, multicast to both) or
splits K (`split` s: each multiplies 1/s of the K tiles for the same output tile).  Split CTAs then
write their float32 accumulators over their own stages, and after a cluster barrier each sums 1/s of
the tile's columns from all of them through distributed shared memory (`mapa`, `ld.shared::cluster`)
and stores it: the partial sums never leave the cluster, and no second kernel adds them up.

A bmm's B products share one launch: grid row `by` is row tile by % ceil(N / rows) of product by // ceil(N / rows)
(wgmma_rows.py's `MatrixRows`), each operand's tensor map is of rank 3 with the product outermost, so that a TMA
box holds one product's tile, and C is indexed [product, row, column] (`c_at`).  A cluster's CTAs compute row tiles
of one product, whose row tiles are a multiple of the cluster (a rule).  mm's kernel is unchanged by this.  An NHWC
convolution's implicit GEMM (conv2d_gemm.py) reads A and writes C through pixel tiles instead (`PixelRows`).

Types (`WGMMA_TYPES`): float16 and bfloat16 in any layout, written in their own type; float8 e4m3, int8 and TF32 with
both operands K-major (PNT: their wgmma transposes neither), written as float32, int32 and float32.  int8's
accumulators are uint32 registers (TVM's wgmma operand for .s32 sums; two's-complement adds are the same bits), stored
to C as the int32 they hold.  TF32's operands are float32 in memory and in the stages (32 to a 128-byte K tile), which
the wgmma reads as TF32, 8 to an instruction, keeping 10 of their 23 stored significand bits.
"""
from __future__ import annotations

from typing import Any

from ..workload import Workload
from .k_split import cluster_ids, partial_sums, peer_sum
from .tma_stages import init_stages, next_stage
from .wgmma_operand import ALIGN, C_PAD, WGMMA_TYPES, Operand, k_tile, shared_bytes, staged_elems
from .wgmma_rows import MatrixRows, PixelRows

WARPGROUP = 128
SEGMENT = 16  # bytes of each store of the staged output to C


def kernel(wl: Workload, p: dict[str, Any], shapes: tuple[tuple[int, ...], ...] | None = None,
           pixels: PixelRows | None = None) -> Any:
    """The PrimFunc of `wl` with knobs `p` (wgmma.py's space); its buffers of `shapes` (A, B, C) where they are
    another operator's tensors (an NHWC convolution's: conv2d_gemm.py), whose rows of A and C are `pixels` where
    they are an implicit GEMM's (wgmma_rows.py), else `wl`'s matrices, row-major."""
    from tvm import tirx
    from tvm.script import tirx as T

    k, m, batch = wl.dims["K"], wl.dims["M"], wl.dims.get("B", 1)
    rows, cols, stages, in_flight = p["rows"], p["cols"], p["stages"], p["in_flight"]
    producer, cluster, split, epilogue, slices = p["producer"], p["cluster"], p["split"], p["epilogue"], p["slices"]
    a_shape, b_shape, c_shape = shapes or (*wl.input_shapes, wl.output_shape)
    e, out = wl.element, wl.out_dtype  # the inputs' type (and the stages'), the output's (and the staged tile's)
    size, per_segment = e.itemsize, SEGMENT // wl.out_itemsize  # output elements in 16 bytes
    ptx_types, mma_k = WGMMA_TYPES[e.name]
    acc_type = "uint32" if e.is_integer else "float32"
    tiles_of = pixels or MatrixRows(wl, rows)  # the grid's rows: every matrix's row tiles in turn, or pixel tiles
    c_view = c_shape if pixels else wl.output_shape
    a = tiles_of.a
    b = Operand(wl.layout[1] == "T", cols, m, k, parts=cluster, itemsize=size, batch=batch)
    depth = k_tile(size)
    tiles, consumers, acc_len = k // depth // split, rows // 64, cols // 2  # tiles: this CTA's K tiles
    width = cols // split  # the columns a CTA stores: its tile's, or its share of a split tile's
    threads = consumers * WARPGROUP  # a K slice's threads: those of slice 0 sum the tile up and store it
    workers = threads * slices  # every consumer thread
    segments = rows * width // per_segment  # 16-byte segments of the staged tile
    row_len = width + C_PAD  # a staged row's elements, padded
    groups = acc_len // 4  # a thread's accumulators by fours: one 8-column group, rows r and r + 8
    ctas = cluster * split  # CTAs of a cluster
    issuer = workers if producer else 0  # the thread that issues the copies
    issued = tiles if producer else min(stages, tiles)  # tiles it loads before (or without) the consumers
    per_slice = stages // slices  # the stages a K slice's tiles take in turn (a rule: slices divide stages)
    a_stage, b_stage = rows * depth, cols * depth
    stage_bytes = (a_stage + b_stage) * size  # what arrives in each CTA, its cluster peer's part of B included

    def fragment(tx: Any, g: Any) -> tuple[Any, Any]:
        """Row and column within the block tile of a thread's first sum of 8-column group g: the m64nN
        accumulator fragment gives warp w of a warpgroup, lane l rows 16w + l/4 (+8) and columns 8g + 2(l%4)
        (+1) of its warpgroup's 64 rows."""
        return (tx // WARPGROUP) * 64 + ((tx % WARPGROUP) // 32) * 16 + (tx % 32) // 4, g * 8 + (tx % 4) * 2

    def partial_at(warpgroup: Any, g: Any, tx: Any) -> Any:
        """Where a thread of `warpgroup` keeps its four sums of group g in a partial tile: thread-minor, four
        floats a thread, so that its 16-byte stores and loads meet no bank conflict."""
        return (warpgroup * groups + g) * (4 * WARPGROUP) + tx % WARPGROUP * 4

    def to_out(value: Any) -> Any:
        """An accumulated sum as C holds it: int8's uint32 registers read as the int32 they hold."""
        return tirx.reinterpret(out, value) if e.is_integer else tirx.Cast(out, value)

    wgmma = f"wgmma.mma_async.sync.aligned.m64n{cols}k{mma_k}.{ptx_types}"
    # after the accumulators, the descriptors and scale-d: the operands' scales (the float types) and their
    # transpose bits (the 16-bit types)
    immediates = () if e.is_integer else (1, 1, a.transpose, b.transpose) if size == 2 else (1, 1)
    copy = "cp.async.bulk.tensor.{}d.shared::cluster.global.mbarrier::complete_tx::bytes"
    copy_a, copy_b = copy.format(tiles_of.a_rank), copy.format(b.rank) + (".multicast::cluster" if cluster > 1 else "")
    to_cluster = [tirx.const((1 << cluster) - 1, "uint16")] if cluster > 1 else []  # multicast's CTA mask
    add_peers = peer_sum(split, acc_type)  # group g's sums of every split CTA, into acc[4j:4j + 4]
    barriers = init_stages(stages, consumers * cluster)  # a stage is released by every warpgroup that reads it
    advance_refill, advance_ring = next_stage(stages), next_stage(per_slice)

    # fmt: off
    @T.macro
    def load(A_s, B_s, pad, bars, a_map, b_map, stage, tile, bx, by, part):
        """The issuer: announce a stage's bytes to its mbarrier and start the TMA copies of K tile `tile`:
        all of A's, and this CTA's part of B's, multicast to the cluster."""
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(bars[stage]), T.uint32(stage_bytes))
        for q in T.unroll(0, a.boxes):
            T.ptx[copy_a](A_s.ptr_to([pad + stage * a_stage + q * a.box_elems]), T.address_of(a_map),
                          *tiles_of.a_coords(tile, by, q), T.address_of(bars[stage]))
        for q in T.unroll(0, b.boxes):
            T.ptx[copy_b](B_s.ptr_to([pad + stage * b_stage + q * b.box_elems + part * b.part_elems]),
                          T.address_of(b_map), *b.coords(tile, bx * cols, q, part, tiles_of.matrix(by)),
                          T.address_of(bars[stage]), *to_cluster)

    @T.macro
    def release(bars, stage, part):
        """A consumer warpgroup is done with a stage: tell the producers of every CTA that writes into it."""
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bars[stages + stage]), T.uint32(1))
        if cluster > 1:
            peer = T.alloc_local([1], "uint32")
            T.ptx.mapa.shared__cluster.u32(peer[0], T.cuda.cvta_generic_to_shared(bars.ptr_to([stages + stage])),
                                           T.uint32(1 - part))
            T.ptx.mbarrier.arrive.shared__cluster.b64(peer[0])

    @T.macro
    def store(C, vals, base, g, bx, by, tx):
        """A thread's four sums vals[base:base + 4] of 8-column group `g` to C (`fragment`)."""
        row = T.meta_var(fragment(tx, g)[0])
        col = T.meta_var(bx * cols + fragment(tx, g)[1])
        if tiles_of.inside(by, row):
            for v in T.vectorized(2):
                C[tiles_of.c_at(by, row, col + v)] = to_out(vals[base + v])
        if tiles_of.inside(by, row + 8):
            for v in T.vectorized(2):
                C[tiles_of.c_at(by, row + 8, col + v)] = to_out(vals[base + 2 + v])

    @T.macro
    def stage_out(tile, vals, base, g, tx):
        """A thread's four sums vals[base:base + 4] of the staged tile's 8-column group `g` to it (rows `C_PAD`
        apart: a warp's 8 rows x 4 lanes of 16-bit pairs fall in distinct banks, and each half-warp's 4 rows x
        4 lanes of 4-byte pairs, which take two banks each)."""
        row = T.meta_var(fragment(tx, g)[0])
        col = T.meta_var(fragment(tx, g)[1])
        for v in T.vectorized(2):
            tile[row * row_len + col + v] = to_out(vals[base + v])
        for v in T.vectorized(2):
            tile[(row + 8) * row_len + col + v] = to_out(vals[base + 2 + v])

    @T.macro
    def write_out(C, tile, first_col, bx, by, tx):
        """The staged tile to C's columns from `first_col` of the block's, in 16-byte segments: a warp writes
        whole rows."""
        for i in T.unroll(0, (segments + threads - 1) // threads):
            seg = T.meta_var(i * threads + tx)
            row = T.meta_var(seg // (width // per_segment))
            col = T.meta_var(seg % (width // per_segment) * per_segment)
            if seg < segments and tiles_of.inside(by, row):
                for v in T.vectorized(per_segment):
                    C[tiles_of.c_at(by, row, bx * cols + first_col + col + v)] = tile[row * row_len + col + v]

    @T.prim_func
    def main(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, a_shape, dtype=e.tvm, align=16)
        B = T.match_buffer(B_ptr, b_shape, dtype=e.tvm, align=16)
        C_in = T.match_buffer(C_ptr, c_shape, dtype=out, align=16)
        C = T.decl_buffer(c_view, out, data=C_in.data)  # C as `tiles_of.c_at` indexes it
        a_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", a_map, e.tvm, tiles_of.a_rank, A.data, *tiles_of.a_map)
        b_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", b_map, e.tvm, b.rank, B.data, *b.tensor_map)
        T.device_entry()
        if ctas > 1:  # CTAs of neighbouring row tiles (of one product) pair up to share B; split CTAs share a tile
            # one grid dimension: TVM 0.27 launches a cluster grid flat but reads 2-D cluster ids as such
            ids = T.alloc_local((2,), "int32")
            c, rank = T.meta_var(cluster_ids(ids, m // cols * (tiles_of.count // cluster), ctas))
            bx = T.meta_var(c % (m // cols))
            by = T.meta_var(c // (m // cols) * cluster + rank % cluster)
            part = T.meta_var(rank % cluster)  # which part of B this CTA loads for its pair
            first = T.meta_var(rank // cluster * tiles)  # this CTA's first K tile
        else:
            bx, by = T.cta_id([m // cols, tiles_of.count])
            part, first = T.meta_var((0, 0))  # the whole of B, from K tile 0
        tx = T.thread_id([(consumers * slices + producer) * WARPGROUP])
        pool = T.SMEMPool()
        bars = pool.alloc((2 * stages,), "uint64", align=8)  # a "full" barrier per stage, then an "empty" one
        pool.move_base_to(ALIGN)
        A_s = pool.alloc((stages * a_stage,), e.tvm, align=ALIGN)
        B_s = pool.alloc((stages * b_stage,), e.tvm, align=ALIGN)
        pool.move_base_to(ALIGN)  # K slices' and a split CTA's partial tiles: over the stages, read by then
        partial = pool.alloc((partial_sums(rows, cols, slices, split) or 4,), acc_type, align=16)
        # the output tile, after the partial one
        staged = pool.alloc((staged_elems(p) or per_segment,), out, align=16)
        pool.commit(shared_bytes(p, wl.out_itemsize))
        # the dynamic shared base is only 64-byte aligned: shift the tiles to a 1024-byte boundary
        pad: T.int32
        pad = T.cast((T.uint32(ALIGN) - T.cuda.cvta_generic_to_shared(A_s.ptr_to([0])) % T.uint32(ALIGN))
                     % T.uint32(ALIGN), "int32") // size
        descs = T.alloc_local((8,), "uint64")  # a K tile's four wgmmas' descriptors of A, then of B
        ring = T.alloc_local((2,), "int32")  # a loop's K tile as its stage and phase: a slice's, or the issuer's
        a_start: T.uint32  # a K tile's start in shared memory, in the descriptors' 16-byte units
        b_start: T.uint32
        acc = T.alloc_local((acc_len,), acc_type)
        barriers(bars, a_map, b_map, tx, issuer)
        if cluster > 1:
            T.cuda.cluster_sync()  # the peer's barriers are ready before anything arrives on them
        else:
            T.cuda.cta_sync()
        if tx == issuer:
            for r in T.unroll(0, 2):
                ring[r] = 0
            for t in T.serial(0, issued, unroll=2):  # nvcc would unroll it in full: code each CTA runs once
                if t >= stages:  # the consumers' release of this stage's previous tile (producer only)
                    T.cuda.mbarrier_wait(T.address_of(bars[stages + ring[0]]), 1 - ring[1])
                load(A_s, B_s, pad, bars, a_map, b_map, ring[0], first + t, bx, by, part)
                advance_refill(ring)
        # the warpgroup's index as lane 0 has it (CUTLASS's canonical_warp_group_idx): one value a warp, which ptxas
        # keeps in uniform registers, and so the consumers' loop counters and descriptors
        group = T.tvm_warp_shuffle(T.uint32(0xFFFFFFFF), tx // WARPGROUP, 0, 32, 32)
        if group < consumers * slices:
            for i in T.unroll(0, acc_len):
                acc[i] = tirx.const(0, acc_type)
            for r in T.unroll(0, 2):
                ring[r] = 0
            for i in T.serial(0, tiles // slices):  # slice s's i-th K tile is i * slices + s, in stage k * slices + s
                stage = T.meta_var(ring[0] * slices + group // consumers)
                a_start = a.start_units(T.cuda.cvta_generic_to_shared(A_s.ptr_to(
                    [pad + stage * a_stage + (group % consumers) * (64 * depth)])))
                b_start = b.start_units(T.cuda.cvta_generic_to_shared(B_s.ptr_to([pad + stage * b_stage])))
                for j in T.unroll(0, 4):  # each wgmma's descriptors, before the wait: the tile's start plus its K step
                    descs[j] = T.uint64(a.descriptor_high()) | T.cast(
                        a_start + T.uint32(a.descriptor_units(a.k_step)) * T.cast(j, "uint32"), "uint64")
                    descs[4 + j] = T.uint64(b.descriptor_high()) | T.cast(
                        b_start + T.uint32(b.descriptor_units(b.k_step)) * T.cast(j, "uint32"), "uint64")
                T.cuda.mbarrier_wait(T.address_of(bars[stage]), ring[1])
                T.cuda.warp_sync()
                T.ptx.wgmma.fence.sync.aligned()
                for j in T.unroll(0, 4):
                    T.ptx[wgmma](*[acc[i] for i in range(acc_len)], descs[j], descs[4 + j], True, *immediates)
                T.ptx.wgmma.commit_group.sync.aligned()
                T.ptx.wgmma.wait_group.sync.aligned(in_flight)  # K tile i - in_flight is read: its stage is free
                done = T.meta_var(T.if_then_else(ring[0] == 0, per_slice, ring[0]) - 1 if in_flight == 1 else ring[0])
                if producer == 1:
                    if i >= in_flight and tx % WARPGROUP == 0:
                        release(bars, done * slices + group // consumers, part)
                else:  # one slice: K tile i is the CTA's i-th
                    T.cuda.cta_sync()
                    if tx == 0 and i >= in_flight and i - in_flight + stages < tiles:
                        load(A_s, B_s, pad, bars, a_map, b_map, done, first + i - in_flight + stages, bx, by, part)
                advance_ring(ring)
            T.ptx.wgmma.wait_group.sync.aligned(0)
        if slices > 1:  # slices 1.. hand their sums to slice 0, thread-minor as a split CTA's partial tile
            T.cuda.cta_sync()  # every wgmma of this CTA has read its stages: the partial tiles may overwrite them
            if tx >= threads and tx < workers:
                for g in T.unroll(0, groups):
                    for v in T.vectorized(4):
                        partial[partial_at(tx // WARPGROUP - consumers, g, tx) + v] = acc[g * 4 + v]
            T.cuda.cta_sync()
            if tx < threads:  # in slice order: deterministic sums
                for s in T.unroll(1, slices):
                    for g in T.unroll(0, groups):
                        for v in T.unroll(0, 4):
                            acc[g * 4 + v] = acc[g * 4 + v] + partial[
                                partial_at((s - 1) * consumers + tx // WARPGROUP, g, tx) + v]
        if split == 1 and epilogue == 0:
            if tx < threads:
                for g in T.unroll(0, groups):
                    store(C, acc, g * 4, g, bx, by, tx)
        if split == 1 and epilogue == 1:  # the tile through shared memory, then out in 16-byte row segments
            T.cuda.cta_sync()  # every wgmma of this CTA has read its stages: the staged tile may overwrite them
            if tx < threads:
                for g in T.unroll(0, groups):
                    stage_out(staged, acc, g * 4, g, tx)
            T.cuda.cta_sync()
            if tx < threads:
                write_out(C, staged, 0, bx, by, tx)
        if split > 1:
            T.cuda.cta_sync()  # every wgmma of this CTA has read its stages: the partial tile may overwrite them
            if tx < threads:
                for g in T.unroll(0, groups):
                    for v in T.vectorized(4):
                        partial[partial_at(tx // WARPGROUP, g, tx) + v] = acc[g * 4 + v]
            T.cuda.cluster_sync()  # every CTA's partial tile is written and visible to the cluster
            if tx < threads:  # CTA `rank` sums and stores groups [rank, rank + 1) * groups / split
                peer_sums = T.alloc_local((split * 4,), acc_type)
                peer = T.alloc_local([1], "uint32")
                for j in T.unroll(0, groups // split):
                    g = T.meta_var(rank * (groups // split) + j)
                    add_peers(acc, j, partial.ptr_to([partial_at(tx // WARPGROUP, g, tx)]), peer_sums, peer)
                    if epilogue == 1:  # staged after the partial tile, which peers may still be reading
                        stage_out(staged, acc, j * 4, j, tx)
                    else:
                        store(C, acc, j * 4, g, bx, by, tx)
            if epilogue == 1:
                T.cuda.cta_sync()
                if tx < threads:
                    write_out(C, staged, rank * width, bx, by, tx)
        if ctas > 1:
            T.cuda.cluster_sync()  # no CTA leaves while a peer may still arrive on its barriers or read its tile
    # fmt: on
    return main

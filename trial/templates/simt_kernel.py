"""The TIRx kernel of the simt template (simt.py declares its knobs, rules and resources).

A CTA has `warps_r` x `warps_c` consumer warps (per K slice, below).  One thread fills `stages` shared
buffers of `bk`-deep K tiles with the tensor memory accelerator (TMA), each stage guarded by a "full"
mbarrier that counts the bytes arriving and an "empty" one on which every warp that reads the tile
arrives once it has.  That
thread is the first of a producer warp of its own (`producer` 1), or the first consumer thread
(`producer` 0: it refills the stage of the previous K tile once every warp has released it, so a CTA
needs no extra warp, whose registers would count against every thread's).

A warp's 32 lanes form a 4 x 8 grid; lane (lr, lc) of warp (wr, wc) owns columns wc*WN + 32b + 4lc + j
(block b < tn/4, j < 4) of the block tile, as CUTLASS's SIMT warp tiles do, and tm rows in blocks of 16:
the eight lanes of a quarter warp share their rows and read 128 contiguous bytes of B, so B's 16-byte
shared loads are free of bank conflicts and A's are broadcasts.  A K-major A (layout N*) is read four
K steps at a time, one 16-byte load per row, and lane row lr owns rows 16b + 4i + lr, so that the four
rows a warp reads at once are adjacent (rows `bk` words long: no bank conflict for bk 8, two-way for 16,
four-way for 32, as for rows 4 apart at any depth); an M-major one is read like B, four rows at a time for
each K step, and lane row lr owns rows 16b + 4lr + i.

K slices (`slices` s > 1): s groups of `warps_r` x `warps_c` consumer warps compute the same tile, slice j
over K tiles j, j + s, ...; each stage serves one slice, and after the loop slices 1.. hand their sums to
slice 0 through shared memory.  A tile of few threads thus keeps a long K in one CTA without a cluster.

A K-major B (layouts *T) is read like a K-major A, four K steps of a column in one 16-byte load.  Its rows
are `bk` words long, so the TMA writes them swizzled (the 32-, 64- or 128-byte swizzle for bk 8, 16, 32:
`b_at`), and a lane's columns sit 8 apart: a quarter warp reads eight adjacent rows' chunks from distinct
banks.  Its sums then reach C one column at a time.

Split-K (`split` s > 1): a cluster of s CTAs computes one output tile, each over 1/s of the K tiles; each
writes its sums over its stages, and after a cluster barrier each sums 1/s of the tile's quads from all of
them through distributed shared memory and stores them: no partial result leaves the cluster.

A bmm's B products share one launch: grid row `by` is row tile by % (N / rows) of product by // (N / rows),
its operands' boxes one product deep (simt_operand.py; an A that every product shares, a pointwise
convolution's weights, is one matrix), and C indexed [product, row, column].
"""
from __future__ import annotations

from typing import Any

from ..workload import Workload
from .k_split import partial_sums, peer_sum
from .simt_operand import SWIZZLED, b_at, box, gemm_of, tensor_map
from .tma_stages import init_stages

ALIGN = 128  # TMA writes a tile to a 128-byte aligned shared address
WARP = 32
LANE_ROWS, LANE_COLS = 4, 8


def block_tile(p: dict[str, Any]) -> tuple[int, int]:
    """Rows and columns of C that one CTA computes."""
    return p["warps_r"] * LANE_ROWS * p["tm"], p["warps_c"] * LANE_COLS * p["tn"]


def shared_bytes(p: dict[str, Any], b_kmajor: bool = False) -> int:
    """The dynamic shared pool: mbarriers (padded to `ALIGN`), the stages or, where larger, the partial tiles,
    and the slack for aligning the stages at run time (`SWIZZLED` where B is swizzled)."""
    rows, cols = block_tile(p)
    partial = partial_sums(rows, cols, p["slices"], p["split"])
    return ALIGN + (SWIZZLED if b_kmajor else ALIGN) + max(p["stages"] * (rows + cols) * p["bk"] * 4, partial * 4)


def kernel(wl: Workload, p: dict[str, Any]) -> Any:
    """The PrimFunc of `wl` with knobs `p` (simt.py's space)."""
    from tvm.script import tirx as T

    n, k, m, batch, a_kmajor, b_kmajor, a_shared, swapped = gemm_of(wl)
    tm, tn, bk, stages, split, slices = p["tm"], p["tn"], p["bk"], p["stages"], p["split"], p["slices"]
    rows, cols = block_tile(p)
    wm, wn = LANE_ROWS * tm, LANE_COLS * tn  # a warp's tile
    consumers = p["warps_r"] * p["warps_c"]  # warps of a K slice
    threads = consumers * WARP  # a K slice's threads: those of slice 0 sum the tile up and store it
    workers = threads * slices  # every consumer thread; the producer warp's lanes come after these
    shape0, shape1 = wl.input_shapes  # the inputs', A then B unless `swapped`
    c_view = (batch, n, m) if batch > 1 else (n, m)  # C as `c_at` indexes it
    a_batch = 1 if a_shared else batch
    a_rank, b_rank = 3 if a_batch > 1 else 2, 3 if batch > 1 else 2
    row_tiles, col_tiles = n // rows, m // cols  # row and column tiles of a product
    a_map_args = tensor_map(a_kmajor, rows, n, k, bk, batch=a_batch)
    b_map_args = tensor_map(b_kmajor, cols, m, k, bk, swizzled=b_kmajor, batch=batch)
    step = 8 if b_kmajor else 1  # between a thread's columns of a block
    align = SWIZZLED if b_kmajor else ALIGN  # of the stages at run time
    tiles = k // bk // split  # this CTA's K tiles
    producer = p["producer"]
    issuer = workers if producer else 0  # the thread that issues the copies
    issued = tiles if producer else min(stages, tiles)  # tiles it loads before (or without) the consumers
    a_stage, b_stage = rows * bk, cols * bk
    stage_bytes = (a_stage + b_stage) * 4
    quads = tm * tn // 4  # a thread's sums by fours: row r, columns 4 apart from block b's first
    copy_a, copy_b = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes"
                      for rank in (a_rank, b_rank))
    add_peers = peer_sum(split)  # quad q's sums of every split CTA, into acc[4j:4j + 4]
    barriers = init_stages(stages, consumers)  # a stage is released by every warp of the slice that reads it

    def row(tx: Any, r: Any) -> Any:
        """A thread's r-th row within the block tile."""
        warp, lane = tx % threads // WARP, tx % WARP
        lr, i = lane // LANE_COLS, r % 4
        return warp // p["warps_c"] * wm + r // 4 * (LANE_ROWS * 4) + (i * LANE_ROWS + lr if a_kmajor else lr * 4 + i)

    def col(tx: Any, b: Any) -> Any:
        """The first of a thread's four columns of block b within the block tile (the others `step` apart)."""
        warp, lane = tx % threads // WARP, tx % WARP
        return warp % p["warps_c"] * wn + b * (LANE_COLS * 4) + lane % LANE_COLS * (1 if b_kmajor else 4)

    def matrix(by: Any) -> Any:
        """The product of grid row `by` (None for mm)."""
        return by // row_tiles if batch > 1 else None

    def first_row(by: Any) -> Any:
        """The first row of grid row `by`'s tile within its product."""
        return by % row_tiles * rows if batch > 1 else by * rows

    def c_at(by: Any, r: Any, c: Any) -> tuple[Any, ...]:
        """C's indices of row r, column c of grid row `by`'s tile."""
        return (first_row(by) + r, c) if batch == 1 else (matrix(by), first_row(by) + r, c)

    def a_frag(r: int, kq: int) -> int:
        """Where a thread keeps A's value of its row r at the kq-th of four K steps: K-major loads give a row's
        four K steps together, M-major ones four rows of one K step."""
        return r * 4 + kq if a_kmajor else kq * tm + r

    def b_frag(c: int, kq: int) -> int:
        """Where a thread keeps B's value of its column c at the kq-th of four K steps (as `a_frag`)."""
        return c * 4 + kq if b_kmajor else c

    def partial_at(tile: Any, q: Any, tx: Any) -> Any:
        """Where a thread keeps quad q of its sums in partial tile `tile`: thread-minor, 16-byte loads and stores
        free of bank conflicts."""
        return (tile * quads + q) * (4 * threads) + tx % threads * 4

    # fmt: off
    @T.macro
    def load(A_s, B_s, pad, bars, a_map, b_map, stage, tile, bx, by):
        """The producer: announce a stage's bytes to its mbarrier and start the TMA copies of K tile `tile`."""
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(bars[stage]), T.uint32(stage_bytes))
        a_matrix = T.meta_var(None if a_shared else matrix(by))  # a shared A has one matrix
        T.ptx[copy_a](A_s.ptr_to([pad + stage * a_stage]), T.address_of(a_map),
                      *box(a_kmajor, first_row(by), tile * bk, a_matrix), T.address_of(bars[stage]))
        T.ptx[copy_b](B_s.ptr_to([pad + stage * b_stage]), T.address_of(b_map),
                      *box(b_kmajor, bx * cols, tile * bk, matrix(by)), T.address_of(bars[stage]))

    @T.macro
    def store(C, acc, i, r, b, bx, by, tx):
        """A thread's sums acc[i:i + 4] to its row r and block b's columns of C."""
        if b_kmajor:
            for j in T.unroll(0, 4):
                C[c_at(by, row(tx, r), bx * cols + col(tx, b) + j * step)] = acc[i + j]
        else:
            for v in T.vectorized(4):
                C[c_at(by, row(tx, r), bx * cols + col(tx, b) + v)] = acc[i + v]

    @T.prim_func
    def main(input0_ptr: T.handle, input1_ptr: T.handle, C_ptr: T.handle):
        input0 = T.match_buffer(input0_ptr, shape0, dtype="float32", align=16)
        input1 = T.match_buffer(input1_ptr, shape1, dtype="float32", align=16)
        C_out = T.match_buffer(C_ptr, wl.output_shape, dtype="float32", align=16)
        C = T.decl_buffer(c_view, "float32", data=C_out.data)
        a_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", a_map, "float32", a_rank,
                      input1.data if swapped else input0.data, *a_map_args)
        b_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", b_map, "float32", b_rank,
                      input0.data if swapped else input1.data, *b_map_args)
        T.device_entry()
        if split > 1:  # the split CTAs of one output tile form a cluster
            # one grid dimension: TVM 0.27 launches a cluster grid flat but reads 2-D cluster ids as such
            c = T.cluster_id([col_tiles * row_tiles * batch])
            rank = T.cta_id_in_cluster([split])
            bx = T.meta_var(c % col_tiles)
            by = T.meta_var(c // col_tiles)
            first = T.meta_var(rank * tiles)  # this CTA's first K tile
        else:
            bx, by = T.cta_id([col_tiles, row_tiles * batch])
            first = T.meta_var(0)
        tx = T.thread_id([workers + producer * WARP])
        pool = T.SMEMPool()
        bars = pool.alloc((2 * stages,), "uint64", align=8)  # a "full" barrier per stage, then an "empty" one
        pool.move_base_to(ALIGN)
        if b_kmajor:  # B's swizzled stages first, whole patterns long: A's follow them aligned
            B_s = pool.alloc((stages * b_stage,), "float32", align=ALIGN)
            A_s = pool.alloc((stages * a_stage,), "float32", align=ALIGN)
        else:
            A_s = pool.alloc((stages * a_stage,), "float32", align=ALIGN)
            B_s = pool.alloc((stages * b_stage,), "float32", align=ALIGN)
        lead = T.meta_var(B_s if b_kmajor else A_s)
        pool.move_base_to(ALIGN)  # K slices' and a split CTA's partial tiles: over the stages, read by then
        partial = pool.alloc((partial_sums(rows, cols, slices, split) or 4,), "float32", align=16)
        pool.commit(shared_bytes(p, b_kmajor))
        # the dynamic shared base is not always `align`ed: shift the tiles to such a boundary (counted in 16-byte
        # vectors: TVM's CUDA codegen emits a 16-byte load only where it sees the offset in floats is a multiple
        # of 4)
        shift: T.let[T.int32] = T.cast((T.uint32(align) - T.cuda.cvta_generic_to_shared(lead.ptr_to([0]))
                                        % T.uint32(align)) % T.uint32(align), "int32") // 16
        pad = T.meta_var(shift * 4)
        acc = T.alloc_local((tm * tn,), "float32")
        a_f = T.alloc_local((tm * 4,), "float32")
        b_f = T.alloc_local((tn * 4 if b_kmajor else tn,), "float32")
        barriers(bars, a_map, b_map, tx, issuer)
        T.cuda.cta_sync()
        if tx == issuer:
            for t in T.serial(0, issued):
                if t >= stages:  # the release of this stage's previous tile by every warp of its slice
                    T.cuda.mbarrier_wait(T.address_of(bars[stages + t % stages]), (t // stages + 1) % 2)
                load(A_s, B_s, pad, bars, a_map, b_map, t % stages, first + t, bx, by)
        if tx < workers:
            for i in T.unroll(0, tm * tn):
                acc[i] = T.float32(0.0)
            for i in T.serial(0, tiles // slices):
                t = T.meta_var(i * slices + tx // threads)  # this slice's i-th K tile
                T.cuda.mbarrier_wait(T.address_of(bars[t % stages]), (t // stages) % 2)
                a_base = T.meta_var(pad + t % stages * a_stage)
                b_base = T.meta_var(pad + t % stages * b_stage)
                for kk in T.unroll(0, bk // 4):
                    if a_kmajor:
                        for r in T.unroll(0, tm):
                            for v in T.vectorized(4):
                                a_f[r * 4 + v] = A_s[a_base + row(tx, r) * bk + kk * 4 + v]
                    else:
                        for kq in T.unroll(0, 4):
                            for rb in T.unroll(0, tm // 4):
                                for v in T.vectorized(4):
                                    a_f[kq * tm + rb * 4 + v] = A_s[a_base + (kk * 4 + kq) * rows + row(tx, rb * 4) + v]
                    if b_kmajor:  # four K steps of each column
                        for c in T.unroll(0, tn):
                            for v in T.vectorized(4):
                                b_f[c * 4 + v] = B_s[b_base + b_at(col(tx, c // 4) + c % 4 * step, kk, bk) + v]
                    for kq in T.unroll(0, 4):
                        if not b_kmajor:
                            for b in T.unroll(0, tn // 4):
                                for v in T.vectorized(4):
                                    b_f[b * 4 + v] = B_s[b_base + (kk * 4 + kq) * cols + col(tx, b) + v]
                        for r in T.unroll(0, tm):
                            for c in T.unroll(0, tn):
                                acc[r * tn + c] = acc[r * tn + c] + a_f[a_frag(r, kq)] * b_f[b_frag(c, kq)]
                T.cuda.warp_sync()
                if tx % WARP == 0:  # this warp is done with the stage: the producer may refill it
                    T.ptx.mbarrier.arrive.shared.b64(T.address_of(bars[stages + t % stages]), T.uint32(1))
                if producer == 0:  # (one slice) the stage of the previous tile, once every warp has released it
                    if tx == 0 and t >= 1 and t - 1 + stages < tiles:
                        T.cuda.mbarrier_wait(T.address_of(bars[stages + (t - 1) % stages]), (t - 1) // stages % 2)
                        load(A_s, B_s, pad, bars, a_map, b_map, (t - 1) % stages, first + t - 1 + stages, bx, by)
        if slices > 1:  # slices 1.. hand their sums to slice 0
            T.cuda.cta_sync()  # every warp has read its stages: the partial tiles may overwrite them
            if tx >= threads and tx < workers:
                for q in T.unroll(0, quads):
                    for v in T.vectorized(4):
                        partial[partial_at(tx // threads - 1, q, tx) + v] = acc[q * 4 + v]
            T.cuda.cta_sync()
            if tx < threads:  # in slice order: deterministic sums
                for s in T.unroll(1, slices):
                    for q in T.unroll(0, quads):
                        for v in T.unroll(0, 4):
                            acc[q * 4 + v] = acc[q * 4 + v] + partial[partial_at(s - 1, q, tx) + v]
        if split == 1:
            if tx < threads:
                for r in T.unroll(0, tm):
                    for b in T.unroll(0, tn // 4):
                        store(C, acc, r * tn + b * 4, r, b, bx, by, tx)
        else:
            # every warp has read its stages (and slice 0 the slices' sums): the partial tile may overwrite them
            T.cuda.cta_sync()
            if tx < threads:
                for q in T.unroll(0, quads):
                    for v in T.vectorized(4):
                        partial[partial_at(0, q, tx) + v] = acc[q * 4 + v]
            T.cuda.cluster_sync()  # every CTA's partial tile is written and visible to the cluster
            if tx < threads:  # CTA `rank` sums and stores quads [rank, rank + 1) * quads / split
                peer_sums = T.alloc_local((split * 4,), "float32")
                peer = T.alloc_local([1], "uint32")
                for j in T.unroll(0, quads // split):
                    q = T.meta_var(rank * (quads // split) + j)
                    add_peers(acc, j, partial.ptr_to([partial_at(0, q, tx)]), peer_sums, peer)
                    store(C, acc, j * 4, q // (tn // 4), q % (tn // 4), bx, by, tx)
            T.cuda.cluster_sync()  # no CTA leaves while a peer may still read its partial tile
    # fmt: on
    return main

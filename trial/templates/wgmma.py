"""Float16 matmul on Hopper's warpgroup MMA (wgmma, CUDA sm_90a), written in TVM's TIRx script layer.

The `mma.sync` kernels of tensorcore.py load every fragment from shared memory into registers with
`ldmatrix`; on an H100 they reach about 45 % of cuBLAS on the study's float16 matmuls.  Here a
warpgroup (4 warps, 128 threads) multiplies 64 x `cols` tiles straight out of shared memory, described
by matrix descriptors, and one thread (of the consumers, or of a producer warpgroup) fills the shared
stages with the tensor memory accelerator (TMA, `cp.async.bulk.tensor`), each stage guarded by an
mbarrier that counts the bytes arriving.
TensorIR's `tensorize` offers no wgmma in TVM 0.27, so the kernel is a TIRx function with its tile
sizes as knobs, compiled with TVM's "tirx" pipeline, rather than a schedule of `prim_func`.

Knobs:
  rows      discrete [64, 128]            block tile rows (N): one or two warpgroups of 64 rows each
  cols      discrete [64, 128, 192, 256]  block tile columns (M): the n of each m64nNk16 wgmma
  stages    discrete [2, 3, 4, 5]         shared buffers of 64-deep K tiles in flight
  in_flight discrete [0, 1]               wgmma groups left running when a stage is refilled: with 1 the
                                          refill waits only for the previous K tile's group
  producer  discrete [0, 1]               who issues the copies: 0, the first thread, after all threads
                                          meet at a barrier each K tile; 1, a warpgroup of its own that
                                          refills a stage when the consumers' mbarrier says it is free
  cluster   discrete [1, 2]               CTAs (of neighbouring row tiles) that share each B tile: with 2,
                                          each loads half of it and the TMA multicasts it to both, so L2
                                          delivers B once per pair (needs producer 1)

Shared layout: each K tile of an operand is stored as the TMA writes it with the 128-byte swizzle.  An
operand whose K is contiguous (A of N*, B of *T) is one box of `rows` x 64; otherwise (A of T*, B of
*N) it is `rows`/64 boxes of 64 (K) x 64, 8 KiB apart.  Their descriptors (16-byte units, PTX ISA
"matrix descriptor"; the MN-major pair as CUTLASS's make_gmma_desc gives it, verified on an H100):
K-major LBO 1 (unused), SBO 64 (8 rows of 128 B), k16 step +32 B; MN-major LBO 512 (between 64-wide
boxes), SBO 64 (8 K rows), k16 step +2 KiB.  The wgmma's transpose bit is 1 for MN-major operands.

Only float16 mm whose N, M and K divide by 64 on sm_90 (`applies`); elsewhere tensorcore.py serves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constraints import Rule
from ..workload import Workload
from .tensorcore import prim_func  # the same computation, for MetaSchedule

if TYPE_CHECKING:
    import tvm

    from ..target import Target

__all__ = ["applies", "search_space", "default_params", "prim_func", "schedule", "resources", "rules",
           "compile_kernel"]

K_TILE = 64  # float16 elements of a 128-byte swizzle row
BOX = 64  # a box of an MN-major operand: 64 x 64 elements, 8 KiB
SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B, and the descriptor's layout type for it
ALIGN = 1024  # a 128-byte swizzle pattern repeats every 8 rows: stages start 1024-aligned
WARPGROUP = 128


def applies(wl: Workload, target: Target | None) -> bool:
    """Whether this template serves `wl` on `target`: float16 mm, dimensions in 64s, a Hopper GPU."""
    return (target is not None and target.kind == "cuda" and target.cuda_arch == 90 and wl.op == "mm"
            and wl.dtype == "float16" and all(wl.dims[d] % K_TILE == 0 for d in "NKM"))


def search_space(wl: Workload) -> dict[str, Any]:
    return {"rows": {"_type": "discrete", "_value": [64, 128]},
            "cols": {"_type": "discrete", "_value": [64, 128, 192, 256]},
            "stages": {"_type": "discrete", "_value": [2, 3, 4, 5]},
            "in_flight": {"_type": "discrete", "_value": [0, 1]},
            "producer": {"_type": "discrete", "_value": [0, 1]},
            "cluster": {"_type": "discrete", "_value": [1, 2]}}


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """128 x 128 tiles, 4 stages, one group in flight: 356 TFLOP/s on mm/N512K1024M4096_f16 (H100), the
    best of its whole space there (64-row or 64-column tiles where N or M is not a multiple of 128)."""
    return {"rows": 128 if wl.dims["N"] % 128 == 0 else 64, "cols": 128 if wl.dims["M"] % 128 == 0 else 64,
            "stages": 4, "in_flight": 1, "producer": 0, "cluster": 1}


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """One warpgroup per 64 rows; dynamic shared memory for the stages, the mbarriers and the alignment
    slack; registers: the m64nN accumulators (N/2 floats a thread) and 26 more, as ptxas counts them."""
    threads = WARPGROUP * (p["rows"] // 64 + p["producer"])
    return {"threads": threads, "thread_dims": (threads, 1, 1), "shared_bytes": _shared_bytes(p),
            "registers_per_thread": p["cols"] // 2 + 26, "exact_cuda_arch": 90}


def rules(wl: Workload) -> list[Rule]:
    """Whole tiles only: K tiles and the block tile (and a cluster's pair of them) divide the operands (TMA
    would pad a partial box with zeros, but the loops and the epilogue take whole tiles); clusters need
    the producer warpgroup."""
    d = wl.dims
    return [Rule(lambda r, c: float(d["K"] % K_TILE != 0), 0.0, grows=False,
                 message=lambda r, c: f"K {d['K']} is not a multiple of the {K_TILE}-deep K tile"),
            Rule(lambda r, c: float(d["N"] % (c["rows"] * c["cluster"]) != 0), 0.0, grows=False,
                 message=lambda r, c: f"rows {c['rows']}{' x cluster 2' if c['cluster'] > 1 else ''} do not divide "
                                      f"N {d['N']}"),
            Rule(lambda r, c: float(c["cluster"] > 1 and not c["producer"]), 0.0, grows=False,
                 message=lambda r, c: "a cluster's CTAs release the stages they share through mbarriers: "
                                      "cluster 2 needs producer 1"),
            Rule(lambda r, c: float(d["M"] % c["cols"] != 0), 0.0, grows=False,
                 message=lambda r, c: f"cols {c['cols']} do not divide M {d['M']}")]


def _shared_bytes(p: dict[str, Any]) -> int:
    """The kernel's dynamic shared pool: mbarriers (padded to `ALIGN`), the stages, `ALIGN` of slack for
    aligning them at run time."""
    return 2 * ALIGN + p["stages"] * (p["rows"] + p["cols"]) * K_TILE * 2


def compile_kernel(mod: tvm.IRModule, target: Target) -> Any:
    """TVM's TIRx pipeline for sm_90a, the architecture with wgmma (a plain sm_90 build rejects it)."""
    import tvm

    return tvm.compile(mod, target={**target.target, "arch": "sm_90a"}, tir_pipeline="tirx")


class _Operand:
    """How one input's K tiles are loaded and described: K-major (one box of `rows` x 64) or MN-major
    (`rows`/64 boxes of 64 x 64).  With `parts` CTAs sharing the tile, each loads 1/`parts` of every box
    (K-major: of its rows, MN-major: of its 64 K rows), which the TMA multicasts to all of them."""

    def __init__(self, k_major: bool, rows: int, extent: int, k: int, parts: int = 1) -> None:
        self.k_major, self.rows, self.parts = k_major, rows, parts
        self.boxes = 1 if k_major else rows // BOX
        self.box_elems = rows * K_TILE if k_major else BOX * K_TILE
        self.part_elems = self.box_elems // parts  # a part is whole 128-byte rows: the swizzle is unchanged
        # tensor map: dims and box innermost first, the row stride in bytes
        dims, box = ((k, extent), (K_TILE, rows // parts)) if k_major else ((extent, k), (BOX, K_TILE // parts))
        self.tensor_map = [*dims, dims[0] * 2, *box, 1, 1, 0, SWIZZLE_128B, 2, 0]
        self.lbo, self.sbo = (1, 64) if k_major else (512, 64)
        self.k_step = 16 if k_major else 16 * BOX  # elements between the k16 slices of a tile
        self.transpose = 0 if k_major else 1

    def coords(self, tile: Any, first_row: Any, box: int, part: Any) -> tuple[Any, Any]:
        """TMA coordinates (innermost first) of part `part` of box `box` of K tile `tile`, rows from `first_row`."""
        if self.k_major:
            return tile * K_TILE, first_row + part * (self.rows // self.parts)
        return first_row + box * BOX, tile * K_TILE + part * (K_TILE // self.parts)


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    import tvm

    return tvm.IRModule({"main": _kernel(wl, p)})


def _kernel(wl: Workload, p: dict[str, Any]) -> Any:
    from tvm import tirx
    from tvm.script import tirx as T

    n, k, m = wl.dims["N"], wl.dims["K"], wl.dims["M"]
    rows, cols, stages, in_flight = p["rows"], p["cols"], p["stages"], p["in_flight"]
    producer, cluster = p["producer"], p["cluster"]
    a_shape, b_shape = wl.input_shapes
    a = _Operand(wl.layout[0] == "N", rows, n, k)
    b = _Operand(wl.layout[1] == "T", cols, m, k, parts=cluster)
    tiles, consumers, acc_len = k // K_TILE, rows // 64, cols // 2
    issuer = consumers * WARPGROUP if producer else 0  # the thread that issues the copies
    issued = tiles if producer else min(stages, tiles)  # tiles it loads before (or without) the consumers
    a_stage, b_stage = rows * K_TILE, cols * K_TILE
    stage_bytes = (a_stage + b_stage) * 2  # what arrives in each CTA, its cluster peer's part of B included
    wgmma = f"wgmma.mma_async.sync.aligned.m64n{cols}k16.f32.f16.f16"
    copy = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
    copy_b = copy + ".multicast::cluster" if cluster > 1 else copy
    to_cluster = [tirx.const((1 << cluster) - 1, "uint16")] if cluster > 1 else []  # multicast's CTA mask

    # fmt: off
    @T.macro
    def load(A_s, B_s, pad, bars, a_map, b_map, stage, tile, bx, by, rank):
        """The issuer: announce a stage's bytes to its mbarrier and start the TMA copies of K tile `tile`:
        all of A's, and this CTA's part of B's, multicast to the cluster."""
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(bars[stage]), T.uint32(stage_bytes))
        for q in T.unroll(0, a.boxes):
            T.ptx[copy](A_s.ptr_to([pad + stage * a_stage + q * a.box_elems]), T.address_of(a_map),
                        *a.coords(tile, by * rows, q, 0), T.address_of(bars[stage]))
        for q in T.unroll(0, b.boxes):
            T.ptx[copy_b](B_s.ptr_to([pad + stage * b_stage + q * b.box_elems + rank * b.part_elems]),
                          T.address_of(b_map), *b.coords(tile, bx * cols, q, rank), T.address_of(bars[stage]),
                          *to_cluster)

    @T.macro
    def release(bars, stage, rank):
        """A consumer warpgroup is done with a stage: tell the producers of every CTA that writes into it."""
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bars[stages + stage]), T.uint32(1))
        if cluster > 1:
            peer = T.alloc_local([1], "uint32")
            T.ptx.mapa.shared__cluster.u32(peer[0], T.cuda.cvta_generic_to_shared(bars.ptr_to([stages + stage])),
                                           T.uint32(1 - rank))
            T.ptx.mbarrier.arrive.shared__cluster.b64(peer[0])

    @T.prim_func
    def main(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, a_shape, dtype="float16", align=16)
        B = T.match_buffer(B_ptr, b_shape, dtype="float16", align=16)
        C = T.match_buffer(C_ptr, (n, m), dtype="float16", align=16)
        a_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", a_map, "float16", 2, A.data, *a.tensor_map)
        b_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", b_map, "float16", 2, B.data, *b.tensor_map)
        T.device_entry()
        if cluster > 1:  # CTAs of neighbouring row tiles pair up; they share every B tile
            # one grid dimension: TVM 0.27 launches a cluster grid flat but reads 2-D cluster ids as such
            c = T.cluster_id([m // cols * (n // (rows * cluster))])
            rank = T.cta_id_in_cluster([cluster])
            bx = T.meta_var(c % (m // cols))
            by = T.meta_var(c // (m // cols) * cluster + rank)
        else:
            bx, by = T.cta_id([m // cols, n // rows])
            rank = T.meta_var(0)
        tx = T.thread_id([(consumers + producer) * WARPGROUP])
        pool = T.SMEMPool()
        bars = pool.alloc((2 * stages,), "uint64", align=8)  # a "full" barrier per stage, then an "empty" one
        pool.move_base_to(ALIGN)
        A_s = pool.alloc((stages * a_stage,), "float16", align=ALIGN)
        B_s = pool.alloc((stages * b_stage,), "float16", align=ALIGN)
        pool.commit(_shared_bytes(p))
        # the dynamic shared base is only 64-byte aligned: shift the tiles to a 1024-byte boundary
        pad: T.int32
        pad = T.cast((T.uint32(ALIGN) - T.cuda.cvta_generic_to_shared(A_s.ptr_to([0])) % T.uint32(ALIGN))
                     % T.uint32(ALIGN), "int32") // 2
        desc_a: T.uint64
        desc_b: T.uint64
        acc = T.alloc_local((acc_len,), "float32")
        if tx == 0:
            for s in T.unroll(0, stages):
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[s]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[stages + s]), T.uint32(consumers * cluster))
        T.ptx.fence.proxy.async_.shared__cta()
        if cluster > 1:
            T.cuda.cluster_sync()  # the peer's barriers are ready before anything arrives on them
        else:
            T.cuda.cta_sync()
        if tx == issuer:
            for t in T.serial(0, issued):
                if t >= stages:  # the consumers' release of this stage's previous tile (producer only)
                    T.cuda.mbarrier_wait(T.address_of(bars[stages + t % stages]), (t // stages + 1) % 2)
                load(A_s, B_s, pad, bars, a_map, b_map, t % stages, t, bx, by, rank)
        if tx < consumers * WARPGROUP:
            for i in T.unroll(0, acc_len):
                acc[i] = T.float32(0.0)
            for t in T.serial(0, tiles):
                T.cuda.mbarrier_wait(T.address_of(bars[t % stages]), (t // stages) % 2)
                T.cuda.warp_sync()
                T.ptx.wgmma.fence.sync.aligned()
                for j in T.unroll(0, 4):
                    T.cuda.wgmma.encode_matrix_descriptor(
                        T.address_of(desc_a),
                        A_s.ptr_to([pad + (t % stages) * a_stage + (tx // WARPGROUP) * (64 * K_TILE) + j * a.k_step]),
                        a.lbo, a.sbo, SWIZZLE_128B)
                    T.cuda.wgmma.encode_matrix_descriptor(
                        T.address_of(desc_b), B_s.ptr_to([pad + (t % stages) * b_stage + j * b.k_step]),
                        b.lbo, b.sbo, SWIZZLE_128B)
                    T.ptx[wgmma](*[acc[i] for i in range(acc_len)], desc_a, desc_b, True, 1, 1, a.transpose,
                                 b.transpose)
                T.ptx.wgmma.commit_group.sync.aligned()
                # K tile t - in_flight is done with: its stage may be refilled
                T.ptx.wgmma.wait_group.sync.aligned(in_flight)
                if producer == 1:
                    if t >= in_flight and tx % WARPGROUP == 0:
                        release(bars, (t - in_flight) % stages, rank)
                else:
                    T.cuda.cta_sync()
                    if tx == 0 and t >= in_flight and t - in_flight + stages < tiles:
                        load(A_s, B_s, pad, bars, a_map, b_map, (t - in_flight) % stages, t - in_flight + stages,
                             bx, by, rank)
            T.ptx.wgmma.wait_group.sync.aligned(0)
            # the m64nN accumulator fragment: warp w of a warpgroup, lane l holds rows 16w + l/4 (+8) and
            # columns 8i + 2(l%4) (+1) of its warpgroup's 64 rows
            for i in T.unroll(0, acc_len // 4):
                row = T.meta_var(by * rows + (tx // WARPGROUP) * 64 + ((tx % WARPGROUP) // 32) * 16 + (tx % 32) // 4)
                col = T.meta_var(bx * cols + i * 8 + (tx % 4) * 2)
                for v in T.vectorized(2):
                    C[row, col + v] = T.Cast("float16", acc[i * 4 + v])
                for v in T.vectorized(2):
                    C[row + 8, col + v] = T.Cast("float16", acc[i * 4 + 2 + v])
        if cluster > 1:
            T.cuda.cluster_sync()  # no CTA leaves while its peer may still arrive on its barriers
    # fmt: on
    return main

"""How the Hopper TIRx kernels (wgmma_kernel.py, simt_kernel.py) divide K beyond one CTA's loop: K slices, groups of
a CTA's consumers that take turns at the TMA stages (the rules they keep), and split CTAs of a cluster, which add
their partial tiles through distributed shared memory (`peer_sum`), each CTA placed by its cluster id and rank
(`cluster_ids`, which wgmma_kernel.py reads through)."""
from __future__ import annotations

from typing import Any

from ..constraints import Rule, not_dividing


def slice_rules() -> list[Rule]:
    """Each stage serves one K slice (an mbarrier wait tells phases apart only by their parity: a slice could take
    the phase of another slice's earlier tile in that stage for its own, where TMA copies land out of order; 3
    stages, slices 2 faulted or hung on an H100; tests/test_wgmma_pipeline.py), and slices need the producer,
    which refills a stage when the mbarrier of the slice reading it frees it."""
    return [Rule(lambda r, c: not_dividing(c["slices"], c["stages"]), 0.0, grows=False,
                 message=lambda r, c: f"stages {c['stages']} are not a multiple of slices {c['slices']}: a stage "
                                      f"that slices share can pass its mbarrier wait on the phase of the other "
                                      f"slice's tile (its copy still landing), and the slice reads that tile"),
            Rule(lambda r, c: float(c["slices"] > 1 and not c["producer"]), 0.0, grows=False,
                 message=lambda r, c: f"K slices take turns at the stages through mbarriers: slices {c['slices']} "
                                      f"needs producer 1")]


def partial_sums(rows: int, cols: int, slices: int, split: int) -> int:
    """The 4-byte sums (float32, or int8's int32) of the partial tiles of a rows x cols block tile that K slices
    1.. hand to slice 0, or (not both at once, in the same shared region) a split CTA to its cluster."""
    return rows * cols * max(slices - 1, split > 1)


def peer_sum(split: int, acc_type: str = "float32") -> Any:
    """A TIRx macro `(acc, j, local, peer_sums, peer)`: acc[4j:4j + 4] = the sum over the cluster's `split` CTAs, in
    rank order (the same sums in every CTA and run), of the four sums at `local`, a pointer into this CTA's
    partial tile, in each CTA's shared memory (`mapa`, `ld.shared::cluster`, every CTA's load in flight at once).
    `peer_sums` (4 x `split` of `acc_type`, float32 or uint32) and `peer` (one address) are the caller's local
    buffers."""
    from tvm.script import tirx as T

    load = f"ld.shared::cluster.v4.{'u32' if acc_type == 'uint32' else 'f32'}"

    # fmt: off
    @T.macro
    def macro(acc, j, local, peer_sums, peer):
        for r in T.unroll(0, split):
            T.ptx.mapa.shared__cluster.u32(peer[0], T.cuda.cvta_generic_to_shared(local), T.uint32(r))
            T.ptx[load](peer_sums[r * 4], peer_sums[r * 4 + 1], peer_sums[r * 4 + 2], peer_sums[r * 4 + 3], peer[0])
        # the sums go to acc[4j:4j + 4], free by now: a place of their own for each j, since TVM's CUDA codegen
        # reuses a vector load of the same text within a scope (stale sums)
        for v in T.unroll(0, 4):
            acc[j * 4 + v] = peer_sums[v]
        for r in T.unroll(1, split):
            for v in T.unroll(0, 4):
                acc[j * 4 + v] = acc[j * 4 + v] + peer_sums[r * 4 + v]
    # fmt: on
    return macro


def cluster_ids(ids: Any, clusters: int, ctas: int) -> tuple[Any, Any]:
    """This CTA's cluster (of a flat grid of `clusters`) and its rank in it (of `ctas`), read once into `ids`, the
    caller's two local int32s, and returned as reads of them.  TVM reads both through volatile `asm`, which nvcc
    neither hoists out of a loop nor merges: a tile coordinate that named them directly would read them again, and
    divide the cluster id again, at each use, e.g. in every TMA copy the producer issues right after its wait for a
    free stage."""
    from tvm.script import tirx as T

    T.buffer_store(ids, T.cluster_id([clusters]), [0])
    T.buffer_store(ids, T.cta_id_in_cluster([ctas]), [1])
    return ids[0], ids[1]

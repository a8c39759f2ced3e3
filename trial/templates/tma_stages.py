"""The TMA stages of the Hopper TIRx kernels (wgmma_kernel.py, simt_kernel.py): their mbarriers, set up before the
first copy, and the ring in which a loop carries its K tile's stage and phase."""
from __future__ import annotations

from typing import Any


def init_stages(stages: int, releases: int) -> Any:
    """A TIRx macro `(bars, a_map, b_map, tx, issuer)`: the issuing thread fetches both tensor maps while thread 0
    sets up each stage's "full" mbarrier (bars[s]: one arrival, the issuer's, with the bytes it expects) and its
    "empty" one (bars[stages + s]: `releases` arrivals, one per consumer group that reads the stage), and the
    barriers are made visible to the TMA (the async proxy).  The caller then syncs its CTA (or cluster)."""
    from tvm.script import tirx as T

    # fmt: off
    @T.macro
    def macro(bars, a_map, b_map, tx, issuer):
        if tx == issuer:
            T.ptx.prefetch.tensormap(T.address_of(a_map))
            T.ptx.prefetch.tensormap(T.address_of(b_map))
        if tx == 0:
            for s in T.unroll(0, stages):
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[s]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[stages + s]), T.uint32(releases))
        T.ptx.fence.proxy.async_.shared__cta()
    # fmt: on
    return macro


def next_stage(count: int) -> Any:
    """A TIRx macro `(ring)`: advance a loop's ring, ring[0] the stage (of `count`) of its current K tile and
    ring[1] that stage's mbarrier phase, to the next K tile.  Carried from one tile to the next rather than divided
    out of the tile's number: a division by a stage count that is not a power of two is a multiply-high chain
    on each trip's path from its wait to its copies or wgmmas."""
    from tvm.script import tirx as T

    # fmt: off
    @T.macro
    def macro(ring):
        ring[1] = T.if_then_else(ring[0] == count - 1, 1 - ring[1], ring[1])  # the last stage: next phase
        ring[0] = T.if_then_else(ring[0] == count - 1, 0, ring[0] + 1)
    # fmt: on
    return macro

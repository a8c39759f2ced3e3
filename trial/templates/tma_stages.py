"""The TMA stages of the Hopper TIRx kernels (wgmma_kernel.py, simt_kernel.py): their mbarriers, set up before the
first copy."""
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

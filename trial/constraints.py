"""What a kernel's knobs must keep on a device, declared once for the knob check, the search space and
the tuners (which hold no device: an experiment's config gives them its limits).

A template reports what one thread block of its GPU schedule uses (`resources(wl, params)`: threads,
thread extents per axis, shared bytes, registers per thread, asynchronous copies, the oldest CUDA
architecture with its tensor-core instructions) and may declare rules of its own (`rules(wl)`, e.g. a
vector width that must divide a tile).  `KernelRules` checks both against a device's limits; it is the
`searchspace.Constraints` of the template's space there.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from searchspace import Config, SearchSpace

from .target import Target
from .workload import Workload

Resources = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """`use(resources, config)` may not exceed `limit`; `message(resources, config)` says how it does.

    `grows`: the use never shrinks as a configuration grows from the template's smallest one (every tile
    part beyond the outermost, every discrete value), so a value that breaks the rule with everything
    else at its smallest breaks it everywhere and can be left out of the search (see `possible`).
    """

    use: Callable[[Resources, Config], float]
    limit: float
    message: Callable[[Resources, Config], str]
    grows: bool = True

    def excess(self, res: Resources, config: Config) -> float:
        used = self.use(res, config)
        return 0.0 if used <= self.limit else (used - self.limit) / max(self.limit, 1.0)


def not_dividing(part: int, whole: int) -> float:
    """0 where `part` divides `whole`, else how far it is from dividing: log2(part / gcd(part, whole)), the
    halvings that take a power of two there.  A rule's graded excess gives a repair a slope down to the
    configurations that keep it, where 1-or-0 leaves it flat until the last step."""
    return math.log2(part / math.gcd(part, whole))


def device_rules(target: Target) -> list[Rule]:
    """The limits of a GPU's thread block (none on the CPU)."""
    if not target.is_gpu:
        return []
    lim, arch, async_copy = target.limits, target.cuda_arch, target.async_copy  # read once: rules run per config
    dims = [Rule(lambda r, c, i=i: r["thread_dims"][i], most,
                 lambda r, c, i=i, axis=axis, most=most: f"threadIdx.{axis} extent {r['thread_dims'][i]} > device "
                                                         f"limit {most}")
            for i, (axis, most) in enumerate(zip("xyz", lim.max_thread_dims))]
    return [
        Rule(lambda r, c: float(bool(r.get("async_copy")) and not async_copy), 0.0,
             lambda r, c: f"asynchronous copies (cp.async) need CUDA sm_80 or newer, not {target.device_name}"),
        Rule(lambda r, c: float(bool(r.get("async_copy")) and r["threads"] < 2), 0.0, grows=False,
             message=lambda r, c: "asynchronous copies (cp.async) in a block of one thread: TVM 0.27 can leave "
                                  "their copy group (tirx.dma_start_group) unlowered there"),
        Rule(lambda r, c: float(r.get("min_cuda_arch", 0) > arch), 0.0,
             lambda r, c: f"these tensor-core instructions need CUDA sm_{r['min_cuda_arch']} or newer, "
                          f"not {target.device_name}"),
        Rule(lambda r, c: float(r.get("exact_cuda_arch", arch) != arch), 0.0,
             lambda r, c: f"these instructions exist on CUDA sm_{r['exact_cuda_arch']} only, not on "
                          f"{target.device_name}"),
        Rule(lambda r, c: r["threads"], lim.max_threads_per_block,
             lambda r, c: f"{r['threads']} threads per block > device limit {lim.max_threads_per_block}"),
        *dims,
        Rule(lambda r, c: r["shared_bytes"], lim.shared_memory_per_block,
             lambda r, c: f"{r['shared_bytes']} bytes of shared memory per block > device limit "
                          f"{lim.shared_memory_per_block}"),
        Rule(lambda r, c: r["registers_per_thread"], lim.max_registers_per_thread,
             lambda r, c: f"about {r['registers_per_thread']} registers per thread > device limit "
                          f"{lim.max_registers_per_thread}"),
        Rule(lambda r, c: r["registers_per_thread"] * r["threads"], lim.max_registers_per_block,
             lambda r, c: f"about {r['registers_per_thread']} registers x {r['threads']} threads > "
                          f"{lim.max_registers_per_block} registers per block"),
    ]


class KernelRules:
    """The rules of `template`'s knobs for `wl` on `target`: device limits and the template's own."""

    def __init__(self, wl: Workload, template: Any, target: Target) -> None:
        self.wl, self.template = wl, template
        own = getattr(template, "rules", None)
        self.rules = [*device_rules(target), *(own(wl) if own and target.is_gpu else [])]
        self._space: SearchSpace | None = None

    def _broken(self, config: Config, rules: list[Rule] | None = None) -> list[tuple[Rule, Resources]]:
        if not self.rules:
            return []
        res = self.template.resources(self.wl, config)
        return [(rule, res) for rule in (self.rules if rules is None else rules) if rule.excess(res, config) > 0]

    def excess(self, config: Config) -> float:
        """0 when every rule holds, else the sum of how far (relative to each limit) each rule is exceeded."""
        if not self.rules:
            return 0.0
        res = self.template.resources(self.wl, config)
        return sum(rule.excess(res, config) for rule in self.rules)

    def problems(self, config: Config) -> list[str]:
        return [rule.message(res, config) for rule, res in self._broken(config)]

    def possible(self, name: str, value: Any) -> bool:
        """Whether the rules that grow hold with `value` and every other knob at its smallest (the choice
        that decides whether `name` matters set so that it does)."""
        if self._space is None:
            self._space = SearchSpace.from_json(self.template.search_space(self.wl))
        return not self._broken({**self._space.least(name), name: value}, [r for r in self.rules if r.grows])

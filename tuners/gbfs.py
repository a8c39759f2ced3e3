"""G-BFS (Zhang et al., "Compiler-Level Matrix Multiplication Optimization for Deep Learning", arXiv 1909.10616).

Greedy best-first search over the configuration graph of `SearchSpace` (two configurations are adjacent
when one parameter differs by one move: a prime factor shifted between tiles, a step to an adjacent
discrete value, another choice, a swap in a permutation). A priority queue holds the measured
configurations by score; the best one not yet expanded is expanded by proposing up to ρ of its unseen
neighbours, drawn at random, which join the queue once measured.

Deviation from the paper, which walks from one initial configuration: the walk starts from the best of
`start_size` random configurations, once that many trials have finished (at once on a warm start, from
the recorded configurations). Walking from the first result to come back ties a run to one random
kernel, good or poor, and with few trials in flight a poor first draw kept the run behind random
sampling for its first trials; the best of several draws starts the walk higher, and its runs ended
higher.

Compared with the 2020 NNI example this tuner never waits for every trial in flight: a request is
answered from the current expansion, else by expanding the next-best measured configuration (skipping
those whose neighbours were all seen), else

* before any success, with a random unseen configuration;
* after one, with the unseen configuration nearest to the best measurement (breadth-first through the
  configurations in flight), which is where the next expansions would lead anyway.

So every request is answered until the space is exhausted, when the base raises `NoMoreTrialError`.
Failed trials (value None) never enter the queue. Like the other tuners it minimizes correctly, is
thread-safe and pairs results by parameter id (see `tuners.base`).
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Any

from .base import SpaceTuner
from .classargs import positive_int
from searchspace import Config, SearchSpace


class GBFSTuner(SpaceTuner):
    """G-BFS as an NNI tuner.

    classArgs:
        optimize_mode: 'maximize' (e.g. GFLOPS, the default) or 'minimize' (e.g. seconds).
        num_samples: ρ, how many unseen neighbours one expansion proposes at most (5).
        start_size: random configurations measured before the walk starts from the best of them (16; 1
            walks from the first success). Results imported on resume count; a warm start skips it.
        seed: seed of the tuner's random generator, for reproducible runs (None).
        warm_start, workload, device, warm_size: warm start from the records (see `SpaceTuner`); the
            recorded configurations, measured again, are the first nodes expanded.
    """

    def __init__(self, optimize_mode: str = "maximize", num_samples: int = 5, start_size: int = 16,
                 seed: int | None = None, **warm: Any) -> None:
        super().__init__(optimize_mode=optimize_mode, seed=seed, **warm)
        self.num_samples = positive_int("num_samples", num_samples)
        self.start_size = positive_int("start_size", start_size)
        self._graph_space: SearchSpace | None = None
        self._frontier: list[tuple[float, int, Config]] = []
        self._in_frontier: set[Hashable] = set()
        self._batch: list[Config] = []
        self._order = itertools.count()

    def propose(self) -> Config | None:
        """A random configuration until `start_size` trials have finished; then the next neighbour of the current
        expansion, else expand the next-best node, else fall back."""
        self._sync()
        if self.num_finished < self.start_size and not self.warm_configs:
            return self.random_unseen()
        while True:
            while self._batch:
                config = self._batch.pop()
                if not self.is_seen(config):
                    return config
            if not self._frontier:
                break
            _, _, node = heapq.heappop(self._frontier)
            self._batch = self.expand(node)
        best = self.best()
        if best is None:
            return self.random_unseen()
        return self.nearest_unseen(best[0])

    def expand(self, node: Config) -> list[Config]:
        """Up to ρ unseen neighbours of `node`, drawn at random: the children of one expansion."""
        assert self.space is not None
        unseen = [c for c in self.space.neighbours(node) if not self.is_seen(c)]
        self.rng.shuffle(unseen)
        return unseen[:self.num_samples]

    def observe(self, config: Config, value: float | None) -> None:
        """A success joins the queue of configurations to expand; a failure is never expanded."""
        self._sync()
        if value is not None:
            self._push(config, value)

    def _push(self, config: Config, value: float) -> None:
        assert self.space is not None
        key = self.space.key(config)
        if key not in self._in_frontier:
            self._in_frontier.add(key)
            heapq.heappush(self._frontier, (-self.score(value), next(self._order), config))

    def _sync(self) -> None:
        """Rebuild the queue from the measurements when the search space was (re)set."""
        assert self.space is not None
        if self._graph_space is self.space:
            return
        self._graph_space = self.space
        self._frontier, self._in_frontier, self._batch = [], set(), []
        for config, value in self.measured():
            self._push(config, value)

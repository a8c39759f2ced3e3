"""OpEvo (Gao et al., "OpEvo: An Evolutionary Method for Tensor Operator Optimization", arXiv 2006.05664).

Every measured configuration stays in the population. An offspring takes each parameter from a parent
drawn (see `selection`) from the `parents_size` fittest measurements, then moves each parameter by a
q-random walk on that parameter's neighbour graph (a factorisation shifts one prime factor, a discrete
value steps to an adjacent one, ...), so mutations prefer nearby tile shapes.

Deviation from the paper, which samples the first λ individuals uniformly: breeding starts once λ
trials have finished, one of them a success, the parents being all successes while there are fewer than
λ (so with one, offspring are its mutations). In a space without the device's rules most samples break
a limit (threads, shared memory, registers): waiting for λ successes spent most of the budget on random,
mostly invalid samples, while short walks from a valid configuration mostly stay valid. In a constrained
space, where every sample is valid, this is the paper's rule; breeding from the first success there
tied a run's first trials to mutations of one random kernel, which with few trials in flight started
worse than random sampling. Until then configurations are sampled (or taken from the records, see
`tuners.base` on warm start).

Second deviation: parents are drawn by rank (linear ranking: the i-th fittest of n with weight n - i),
not in proportion to fitness as in the paper (`selection: fitness` restores that). The fittest kernels
of a run differ by a few per cent in GFLOPS, so proportional weights pick them almost uniformly: the
best parent is drawn barely more often than the eighth. Measured, the change was within run-to-run
noise, in how soon a run came near its best and in how good that best was.

Optional extension (`screen` > 1, off by default): each trial measures the best of `screen` unseen
offspring as a cost model (`tuners.surrogate`) fitted to the run's measurements ranks them, the
screening that Ansor and MetaSchedule give their evolutionary search.

Compared with the 2020 NNI example this tuner selects correctly when minimizing, ends a finite space with
`NoMoreTrialError`, answers waiting requests through st_callback, keeps failed trials out of the parents
without proposing them again, is thread-safe, and pairs results by parameter id (see `tuners.base`).
"""
from __future__ import annotations

from itertools import accumulate
from typing import Any

from .base import SpaceTuner
from .classargs import number_in, positive_int
from .surrogate import Surrogate
from searchspace import Config, SpaceError
from searchspace.param import copied, shown

SELECTIONS = ("rank", "fitness")
BREED_TRIES = 32
"""Offspring bred before falling back to the nearest unseen neighbour of the last one."""
REFIT_ROUND = 64
"""The cost model is refitted after every result while it was fitted on fewer than 2 x REFIT_ROUND, then once
REFIT_ROUND more trials have finished, as Ansor and MetaSchedule retrain once a round of 64 measurements. A fit
takes time in proportion to the history, and NNI's dispatcher waits on the tuner: refitted after every result,
the model makes a long run's tuner slower than several GPUs measure (docs/results.md)."""
IN_FLIGHT_SHARE = 16
"""With many trials in flight, the short history's refit waits for a 1/IN_FLIGHT_SHARE of them to report: the
trials in flight are results the model lacks in any case (so below 32 in flight, after every result)."""


class OpEvoTuner(SpaceTuner):
    """OpEvo as an NNI tuner.

    classArgs:
        optimize_mode: 'maximize' (e.g. GFLOPS, the default) or 'minimize' (e.g. seconds).
        parents_size: λ, how many of the fittest measurements may be parents (8).
        offspring_size: μ, how many offspring may be in flight at once (8). As in the paper, a generation
            of μ offspring is bred without its siblings' results; requests beyond μ wait for a result, so
            set trialConcurrency <= offspring_size to keep every trial slot busy.
        mutate_rate: probability that a walk takes each further step, in [0, 1) (0.5): a parameter
            leaves its inherited value with this probability. The paper's q (probability of stopping)
            is 1 - mutate_rate; larger rates explore, smaller rates exploit.
        selection: how parents are drawn from the fittest: 'rank' (weight n - i for the i-th of n, the
            default) or 'fitness' (in proportion to the metric, or its reciprocal when minimizing; the paper's).
        screen: offspring bred per trial, of which the cost model's favourite is measured (1: none, the
            paper's OpEvo). The model ranks once MIN_FIT trials have finished; until then one offspring is bred.
        seed: seed of the tuner's random generator, for reproducible runs (None).
        warm_start, workload, device, warm_size: warm start from the records (see `SpaceTuner`); the
            recorded configurations, measured again, become the first parents.
    """

    def __init__(self, optimize_mode: str = "maximize", parents_size: int = 8, offspring_size: int = 8,
                 mutate_rate: float = 0.5, selection: str = "rank", screen: int = 1, seed: int | None = None,
                 **warm: Any) -> None:
        super().__init__(optimize_mode=optimize_mode, seed=seed, **warm)
        self.parents_size = positive_int("parents_size", parents_size)
        self.offspring_size = positive_int("offspring_size", offspring_size)
        self.mutate_rate = number_in("mutate_rate", mutate_rate, 0, 1, open_high=True)
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {', '.join(map(repr, SELECTIONS))}, got {shown(selection)}")
        self.selection = selection
        self.screen = positive_int("screen", screen, most=1024)
        self._surrogate: Surrogate | None = None
        self._fitted_on = 0

    def parents(self) -> list[tuple[Config, float]]:
        """The fittest successful measurements, at most `parents_size`, best first (ties: oldest first)."""
        return self.top(self.parents_size)

    def propose(self) -> Config | None:
        """Wait while μ trials are in flight; sample until λ trials finished, one of them a success; then breed an
        unseen offspring (with `screen` > 1, the one of `screen` that the cost model ranks first).

        An offspring that breaks the device's rules (a constrained space) is repaired to the nearest one that
        keeps them: parents that each fit may combine into one that does not; one whose repair finds none is
        left, and another bred."""
        if self.num_pending >= self.offspring_size:
            return None
        parents = self.parents()
        if not parents or self.num_finished < self.parents_size:
            return self.random_unseen()
        configs = [config for config, _ in parents]
        weights = self._weights([value for _, value in parents])
        wanted = self.screen if self._model_ranks() else 1
        candidates: dict[Any, Config] = {}
        child = {}
        for _ in range(BREED_TRIES * wanted):
            try:
                child = self.space.repair(self._breed(configs, weights), self.rng)
            except SpaceError:  # the repair's descent found no valid configuration near this one: breed another
                continue
            key = self.space.key(child)
            if not self.is_seen_key(key):
                candidates.setdefault(key, child)
                if len(candidates) == wanted:
                    break
        if not candidates:
            return self.nearest_unseen(child) if child else self.random_unseen()
        offspring = list(candidates.values())
        return self._surrogate.best(offspring) if self._surrogate and wanted > 1 else offspring[0]

    def _model_ranks(self) -> bool:
        """Whether the cost model can rank offspring (screen > 1 and enough results), refitted first if the space
        changed or enough trials finished since its last fit (`REFIT_ROUND`). While it cannot, a single
        offspring is bred."""
        if self.screen == 1:
            return False
        finished = self.num_finished
        short = self._fitted_on < 2 * REFIT_ROUND
        grown = finished - self._fitted_on >= (max(1, self.num_pending // IN_FLIGHT_SHARE) if short else REFIT_ROUND)
        if grown or self._surrogate is None or self._surrogate.space is not self.space:
            history = [(config, None if value is None else self.score(value)) for config, value in self.history()]
            self._surrogate = Surrogate(self.space, self.args.seed)
            self._surrogate.fit(history)
            self._fitted_on = len(history)
        return self._surrogate.fitted

    def _breed(self, parents: list[Config], weights: list[float]) -> Config:
        """Each parameter comes from a parent drawn by `weights`, then takes a q-random walk; one that is inert
        in the child (its kernel family not chosen, searchspace/condition.py) is inherited unchanged, so that
        no mutation is spent where it cannot change the kernel."""
        assert self.space is not None
        child: Config = {}
        conditional, cumulative = self.space.conditions, list(accumulate(weights))  # `choices` sums them each call
        for name in sorted(self.space.names, key=lambda n: n in conditional):  # the deciding choices first
            parent = self.rng.choices(parents, cum_weights=cumulative)[0]
            active = name not in conditional or self.space.active(name, child)
            child[name] = (self.space[name].mutate(parent[name], self.rng, q=1.0 - self.mutate_rate) if active
                           else copied(parent[name]))
        return {name: child[name] for name in self.space.names}

    def _weights(self, values: list[float]) -> list[float]:
        """Selection weights of the parents (`values`, best first): by rank, or proportional to fitness.

        Fitness is the metric when maximizing and its reciprocal when minimizing (seconds become a rate,
        the same ordering as GFLOPS). For a metric where that would give negative (or only zero) weights,
        the parents are weighted by rank.
        """
        if self.selection == "fitness":
            if self.maximize and all(v >= 0 for v in values) and any(v > 0 for v in values):
                return list(values)
            if not self.maximize and all(v > 0 for v in values):
                return [1.0 / v for v in values]
        return [float(len(values) - i) for i in range(len(values))]

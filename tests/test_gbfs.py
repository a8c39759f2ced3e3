"""GBFSTuner driven in-process through the NNI 3.0 Tuner API, on synthetic objectives over real spaces.

The spaces, the objective and the random-search baseline here are shared with test_na2c.py.
"""
from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from typing import Any

import nni
import pytest
from test_opevo import TINY, FakeNNI, no_checkpoint_dir, ok  # noqa: F401 - the fixture applies here too

from tuners.base import RequestQueued
from tuners.gbfs import GBFSTuner
from tuners.space import Config, SearchSpace

MM = {
    "K": {"_type": "factor", "_value": [1024, 3]},
    "X": {"_type": "factor", "_value": [512, 4]},
    "Y": {"_type": "factor", "_value": [1024, 4]},
    "unroll": {"_type": "discrete", "_value": [0, 16, 64, 512, 1500]},
    "vec": {"_type": "discrete", "_value": [1, 2, 4]},
}
BMM = {**MM, "B": {"_type": "factor", "_value": [960, 2]}}
CONV = {
    "tile_f": {"_type": "factor", "_value": [64, 4]},
    "tile_y": {"_type": "factor", "_value": [55, 4]},
    "tile_x": {"_type": "factor", "_value": [55, 4]},
    "tile_rc": {"_type": "factor", "_value": [3, 2]},
    "tile_ry": {"_type": "factor", "_value": [11, 2]},
    "tile_rx": {"_type": "factor", "_value": [11, 2]},
    "auto_unroll_max_step": {"_type": "discrete", "_value": [0, 125, 256]},
    "unroll_explicit": {"_type": "choice", "_value": [0, 1]},
}
ORDERED = {**MM, "order": {"_type": "perm", "_value": [5]}, "layout": {"_type": "choice", "_value": ["NN", "NT", "TN"]}}
SPACES = {"mm": MM, "bmm": BMM, "conv": CONV, "perm": ORDERED}


def objective(space_json: dict, seed: int = 123) -> Callable[[Config], float]:
    """A smooth stand-in for kernel speed (GFLOPS, peak 1000) around a random optimum of the space.

    Distance: squared log2 ratios of tiles, squared rank steps (doubled) of discrete values, 2 per
    different choice, 1 per misplaced item of a permutation; so neighbour moves change it gradually.
    """
    space = SearchSpace.from_json(space_json)
    best = space.sample(random.Random(seed))

    def gflops(config: Config) -> float:
        d = 0.0
        for name, p in space.params.items():
            a, b = config[name], best[name]
            if p.type_name == "factor":
                d += sum((math.log2(x) - math.log2(y)) ** 2 for x, y in zip(a, b))
            elif p.type_name == "discrete":
                d += 2 * (p.key(a) - p.key(b)) ** 2
            elif p.type_name == "choice":
                d += 2.0 * (a != b)
            else:
                d += sum(x != y for x, y in zip(a, b))
        return 1000.0 * math.exp(-d / 8)

    return gflops


def random_search_best(space_json: dict, seed: int, budget: int, f: Callable[[Config], float], pick=max) -> float:
    """The best of `budget` distinct uniformly sampled configurations."""
    space = SearchSpace.from_json(space_json)
    rng = random.Random(seed)
    seen: dict[tuple, float] = {}
    while len(seen) < budget:
        config = space.sample(rng)
        seen.setdefault(space.key(config), f(config))
    return pick(seen.values())


def make_tuner(space: dict = MM, **kwargs: Any) -> GBFSTuner:
    tuner = GBFSTuner(**kwargs)
    tuner.update_search_space(space)
    return tuner


def keys(space: dict, configs: list[Config]) -> list[tuple]:
    model = SearchSpace.from_json(space)
    return [model.key(c) for c in configs]


def is_neighbour(space: SearchSpace, a: Config, b: Config) -> bool:
    return space.key(b) in {space.key(c) for c in space.neighbours(a)}


class Recording(GBFSTuner):
    """Remembers which configurations were expanded."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.expanded: list[Config] = []

    def expand(self, node: Config) -> list[Config]:
        self.expanded.append(node)
        return super().expand(node)


# ---- behaviour as an optimiser ---------------------------------------------------------------------

@pytest.mark.parametrize("name", SPACES)
def test_beats_random_search_maximizing(name: str) -> None:
    space, f = SPACES[name], objective(SPACES[name])
    budget, seeds = 150, range(5)
    runs = [FakeNNI(make_tuner(space, seed=s), lambda c: ok(f(c)), order_seed=s).run(budget) for s in seeds]
    model = SearchSpace.from_json(space)
    for run in runs:
        assert len(run.proposed) == budget
        assert len(set(keys(space, run.proposed))) == budget
        for config in run.proposed:
            model.validate(config)
    gbfs = statistics.mean(max(run.values) for run in runs)
    rand = statistics.mean(random_search_best(space, s, budget, f) for s in seeds)
    assert gbfs > 5 * rand


@pytest.mark.parametrize("name", ["mm", "conv"])
def test_beats_random_search_minimizing(name: str) -> None:
    space, f = SPACES[name], objective(SPACES[name])

    def seconds(config: Config) -> float:
        return 1.0 / f(config)

    budget, seeds = 150, range(5)
    gbfs = [min(FakeNNI(make_tuner(space, optimize_mode="minimize", seed=s), lambda c: ok(seconds(c)),
                        order_seed=s).run(budget).values) for s in seeds]
    rand = [random_search_best(space, s, budget, seconds, pick=min) for s in seeds]
    assert statistics.mean(gbfs) < statistics.mean(rand) / 5


def test_same_seed_same_run() -> None:
    f = objective(BMM)

    def run(seed: int) -> list[Config]:
        return FakeNNI(make_tuner(BMM, seed=seed), lambda c: ok(f(c)), order_seed=5).run(60).proposed

    assert run(3) == run(3)
    assert run(3) != run(4)


@pytest.mark.parametrize("mode", ["maximize", "minimize"])
def test_expands_the_best_node_with_rho_unseen_neighbours(mode: str) -> None:
    # One trial at a time: the seed, then ρ of its neighbours, then ρ neighbours of the best of those.
    space, f = SearchSpace.from_json(CONV), objective(CONV)
    metric = f if mode == "maximize" else (lambda c: 1.0 / f(c))  # GFLOPS or seconds: same best
    tuner = Recording(optimize_mode=mode, num_samples=3, seed=7)
    tuner.update_search_space(CONV)
    nni_ = FakeNNI(tuner, lambda c: ok(metric(c)), concurrency=1)
    nni_.run(7)
    seed, first, second = nni_.proposed[0], nni_.proposed[1:4], nni_.proposed[4:7]
    assert tuner.expanded[:2] == [seed, max(first, key=f)]
    assert all(is_neighbour(space, seed, c) for c in first)
    assert all(is_neighbour(space, tuner.expanded[1], c) for c in second)
    assert len(set(keys(CONV, nni_.proposed))) == 7


def test_exhausted_node_passes_to_the_next_best() -> None:
    # A one-parameter space where the best node's only neighbours are already seen.
    space = {"v": {"_type": "discrete", "_value": [1, 2, 3, 4, 5, 6, 7]}}
    tuner = make_tuner(space, num_samples=5)
    tuner.import_data([{"parameter": {"v": 4}, "value": 9.0}, {"parameter": {"v": 3}, "value": 1.0},
                       {"parameter": {"v": 5}, "value": 2.0}])
    assert tuner.generate_multiple_parameters([0]) == [{"v": 6}]  # 4 has no unseen neighbour, 5 is next


def test_never_stalls_while_trials_are_in_flight() -> None:
    # Before any result: a random multi-start; after one, ρ neighbours of it and then its wider surroundings.
    tuner = make_tuner(CONV, num_samples=2, seed=0)
    first = tuner.generate_multiple_parameters(list(range(4)))
    assert len(first) == 4
    tuner.receive_trial_result(0, first[0], ok(5.0))
    more = tuner.generate_multiple_parameters(list(range(4, 16)))
    assert len(more) == 12
    assert len(set(keys(CONV, first + more))) == 16
    space = SearchSpace.from_json(CONV)
    assert all(is_neighbour(space, first[0], c) for c in more[:2])


def test_failed_trials_are_never_expanded() -> None:
    f = objective(MM)

    def measured(config: Config) -> Any:
        if config["vec"] == 4:
            # A failure that claims a huge metric must still not be expanded.
            return {"default": 1e9, "status": "compile_error", "reason": "too many registers"}
        if config["unroll"] == 1500:
            return None  # the trial crashed without reporting
        return ok(f(config))

    tuner = Recording(seed=4)
    tuner.update_search_space(MM)
    nni_ = FakeNNI(tuner, measured, order_seed=2).run(200)
    assert len(set(keys(MM, nni_.proposed))) == len(nni_.proposed) == 200
    failed = [c for c, v in tuner.history() if v is None]
    assert any(c["vec"] == 4 for c in failed) and any(c["unroll"] == 1500 for c in failed)
    assert tuner.expanded and all(c["vec"] != 4 and c["unroll"] != 1500 for c in tuner.expanded)
    best = tuner.best()
    assert best is not None and best[0]["vec"] != 4 and best[1] == max(nni_.values)


def test_import_data_seeds_the_search() -> None:
    f = objective(MM)
    earlier = SearchSpace.from_json(MM).sample(random.Random(1))
    tuner = make_tuner(MM, seed=0)
    tuner.import_data([{"parameter": earlier, "value": ok(f(earlier))}])
    proposed = tuner.generate_multiple_parameters([0, 1, 2])
    space = SearchSpace.from_json(MM)
    assert all(is_neighbour(space, earlier, c) for c in proposed)


# ---- NNI protocol ----------------------------------------------------------------------------------

def test_tiny_space_is_exhausted_after_each_config_once() -> None:
    space = SearchSpace.from_json(TINY)

    def measured(config: Config) -> Any:
        if config["b"] == "y" and config["c"] == [1, 0]:
            return {"default": None, "status": "compile_error", "reason": "boom"}
        return ok(float(config["a"][0]))

    tuner = make_tuner(TINY, num_samples=2, seed=0)
    nni_ = FakeNNI(tuner, measured, concurrency=3, order_seed=1)
    nni_.request(3)
    while not nni_.exhausted:
        if nni_.running:
            nni_.finish_one()
        nni_.request(1)
    assert sorted(keys(TINY, nni_.proposed)) == sorted(space.key(c) for c in space.values())
    with pytest.raises(nni.NoMoreTrialError) as info:
        tuner.generate_parameters(999, st_callback=nni_.callback)
    assert not isinstance(info.value, RequestQueued)
    assert tuner.generate_multiple_parameters([1000, 1001], st_callback=nni_.callback) == []


def test_exhaustion_while_trials_are_in_flight() -> None:
    tuner = make_tuner({"v": {"_type": "perm", "_value": [3]}})
    assert len(tuner.generate_multiple_parameters(list(range(8)))) == 6
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(8)


@pytest.mark.parametrize("kwargs, name", [
    ({"optimize_mode": "max"}, "optimize_mode"),
    ({"num_samples": 0}, "num_samples"),
    ({"num_samples": 2.5}, "num_samples"),
    ({"num_samples": True}, "num_samples"),
    ({"seed": 1.5}, "seed"),
])
def test_bad_class_args(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        GBFSTuner(**kwargs)

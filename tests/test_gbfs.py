"""GBFSTuner driven in-process through the NNI 3.0 Tuner API, on synthetic objectives over real spaces."""
from __future__ import annotations

import random
from typing import Any

import nni
import pytest
import tuner_harness as h
import tuner_scenarios as sc
from tuner_harness import BMM, CONV, MM, SPACES, FakeNNI, is_neighbour, keys, objective, ok
from tuner_harness import no_checkpoint_dir  # noqa: F401 - the autouse fixture applies to this module

from tuners.gbfs import GBFSTuner
from searchspace import Config, SearchSpace


def make_tuner(space: dict = MM, **kwargs: Any) -> GBFSTuner:
    return h.make_tuner(GBFSTuner, space, **kwargs)


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
    h.assert_beats_random(GBFSTuner, SPACES[name], objective(SPACES[name]), 5)


@pytest.mark.parametrize("name", ["mm", "conv"])
def test_beats_random_search_minimizing(name: str) -> None:
    h.assert_beats_random(GBFSTuner, SPACES[name], objective(SPACES[name]), 5, optimize_mode="minimize")


def test_constrained_space() -> None:
    # Most of the space is beyond the device's limits: expanding valid configs keeps trials valid.
    sc.assert_valid_and_better(GBFSTuner, 5)


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
    tuner = Recording(optimize_mode=mode, num_samples=3, start_size=1, seed=7)
    tuner.update_search_space(CONV)
    nni_ = FakeNNI(tuner, lambda c: ok(metric(c)), concurrency=1)
    nni_.run(7)
    seed, first, second = nni_.proposed[0], nni_.proposed[1:4], nni_.proposed[4:7]
    assert tuner.expanded[:2] == [seed, max(first, key=f)]
    assert all(is_neighbour(space, seed, c) for c in first)
    assert all(is_neighbour(space, tuner.expanded[1], c) for c in second)
    assert len(set(keys(CONV, nni_.proposed))) == 7


def test_walks_from_the_best_of_the_first_start_size_results() -> None:
    # Random configurations until start_size trials have finished, then ρ neighbours of the best of them.
    space, f = SearchSpace.from_json(CONV), objective(CONV)
    tuner = Recording(num_samples=3, start_size=6, seed=2)
    tuner.update_search_space(CONV)
    nni_ = FakeNNI(tuner, lambda c: ok(f(c)), concurrency=1).run(9)
    start = nni_.proposed[:6]
    assert tuner.expanded == [max(start, key=f)]
    assert all(is_neighbour(space, tuner.expanded[0], c) for c in nni_.proposed[6:])
    assert not all(is_neighbour(space, start[0], c) for c in start[1:])


def test_exhausted_node_passes_to_the_next_best() -> None:
    # A one-parameter space where the best node's only neighbours are already seen.
    space = {"v": {"_type": "discrete", "_value": [1, 2, 3, 4, 5, 6, 7]}}
    tuner = make_tuner(space, num_samples=5, start_size=3)  # the imported results count as the start
    tuner.import_data([{"parameter": {"v": 4}, "value": 9.0}, {"parameter": {"v": 3}, "value": 1.0},
                       {"parameter": {"v": 5}, "value": 2.0}])
    assert tuner.generate_multiple_parameters([0]) == [{"v": 6}]  # 4 has no unseen neighbour, 5 is next


def test_never_stalls_while_trials_are_in_flight() -> None:
    # Before any result: a random multi-start; after one, ρ neighbours of it and then its wider surroundings.
    tuner = make_tuner(CONV, num_samples=2, start_size=1, seed=0)
    first = tuner.generate_multiple_parameters(list(range(4)))
    assert len(first) == 4
    tuner.receive_trial_result(0, first[0], ok(5.0))
    more = tuner.generate_multiple_parameters(list(range(4, 16)))
    assert len(more) == 12
    assert len(set(keys(CONV, first + more))) == 16
    space = SearchSpace.from_json(CONV)
    assert all(is_neighbour(space, first[0], c) for c in more[:2])


def test_failed_trials_are_never_expanded() -> None:
    # A failure that claims a huge metric (vec 4) must still not be expanded.
    tuner = Recording(seed=4)
    tuner.update_search_space(MM)
    nni_ = FakeNNI(tuner, h.failing(objective(MM), crash=lambda c: c["unroll"] == 1500), order_seed=2).run(200)
    assert len(set(keys(MM, nni_.proposed))) == len(nni_.proposed) == 200
    failed = [c for c, v in tuner.history() if v is None]
    assert any(c["vec"] == 4 for c in failed) and any(c["unroll"] == 1500 for c in failed)
    assert tuner.expanded and all(c["vec"] != 4 and c["unroll"] != 1500 for c in tuner.expanded)
    best = tuner.best()
    assert best is not None and best[0]["vec"] != 4 and best[1] == max(nni_.values)


def test_import_data_seeds_the_search() -> None:
    f = objective(MM)
    earlier = SearchSpace.from_json(MM).sample(random.Random(1))
    tuner = make_tuner(MM, start_size=1, seed=0)
    tuner.import_data([{"parameter": earlier, "value": ok(f(earlier))}])
    proposed = tuner.generate_multiple_parameters([0, 1, 2])
    space = SearchSpace.from_json(MM)
    assert all(is_neighbour(space, earlier, c) for c in proposed)


# ---- warm start --------------------------------------------------------------------------------------

def test_warm_start(tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    sc.assert_warm_start(GBFSTuner, tmp_path, monkeypatch, caplog)


def test_warm_start_configs_are_expanded_first(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    sc.recorded_store(tmp_path, monkeypatch)
    tuner = Recording(warm_start=True, workload=sc.WORKLOAD, device=sc.DEVICE, num_samples=3, seed=0)
    tuner.update_search_space(MM)
    nni_ = FakeNNI(tuner, sc.constrained, concurrency=1).run(5)
    assert nni_.proposed[:2] == [sc.PEAK, sc.SECOND]
    assert tuner.expanded == [sc.PEAK]
    space = SearchSpace.from_json(MM)
    assert all(is_neighbour(space, sc.PEAK, c) for c in nni_.proposed[2:])


# ---- NNI protocol ----------------------------------------------------------------------------------

def test_tiny_space_is_exhausted_after_each_config_once() -> None:
    h.assert_exhausts_tiny(GBFSTuner, concurrency=3, num_samples=2)


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
    ({"start_size": 0}, "start_size"),
    ({"seed": 1.5}, "seed"),
    *sc.BAD_COMMON_ARGS,
])
def test_bad_class_args(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        GBFSTuner(**kwargs)

"""OpEvoTuner driven in-process through the NNI 3.0 Tuner API, on synthetic matmul objectives."""
from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
import tuner_harness as h
import tuner_scenarios as sc
from tuner_harness import MATMUL, FakeNNI, gflops, keys, no_checkpoint_dir, ok  # noqa: F401 - the fixture applies here too

from tuners.opevo import OpEvoTuner
from tuners.surrogate import MIN_FIT, Surrogate
from searchspace import SearchSpace, SpaceError

TINY = h.TINY
def make_tuner(space: dict = MATMUL, **kwargs: Any) -> OpEvoTuner:
    return h.make_tuner(OpEvoTuner, space, **kwargs)


# ---- behaviour as an optimiser ---------------------------------------------------------------------

def test_proposals_are_valid_unique_plain_json() -> None:
    nni_ = FakeNNI(make_tuner(seed=1), lambda c: ok(gflops(c)), concurrency=6, order_seed=0).run(150)
    space = SearchSpace.from_json(MATMUL)
    assert len(nni_.proposed) == 150
    for config in nni_.proposed:
        space.validate(config)
        h.assert_plain_json(config)  # FakeNNI records the tuner's answers as they are, not JSON round-tripped
    assert len(set(keys(MATMUL, nni_.proposed))) == 150


class TupleTuner(OpEvoTuner):
    """Proposes tiles as tuples, which NNI would hand to the trial as lists: from the `after`-th proposal on."""

    def __init__(self, after: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.after = after

    def propose(self) -> dict | None:
        config = super().propose()
        if config is None or len(self._entries) < self.after:
            return config
        return {name: tuple(v) if isinstance(v, list) else v for name, v in config.items()}


def test_harness_rejects_answers_that_are_not_plain_json() -> None:
    # Answered directly by generate_multiple_parameters.
    with pytest.raises(AssertionError, match="not (plain JSON|a JSON array)"):
        FakeNNI(h.make_tuner(TupleTuner, MATMUL, seed=0), lambda c: ok(gflops(c))).run(4)
    # Sent later through st_callback: with μ = 1 the second request waits for the first result.
    nni_ = FakeNNI(h.make_tuner(TupleTuner, MATMUL, after=1, offspring_size=1, seed=0), lambda c: ok(gflops(c)),
                   concurrency=2)
    nni_.request(2)
    assert len(nni_.proposed) == 1
    with pytest.raises(AssertionError, match="not (plain JSON|a JSON array)"):
        nni_.finish_one()
    for bad in ({"a": (1, 2)}, {"a": [1, (2,)]}, {1: 2}, {"a": math.nan}, {"a": [object()]}):
        with pytest.raises((AssertionError, TypeError, ValueError)):
            h.assert_plain_json(bad)
    h.assert_plain_json({"a": [1, 2.5, "x", True, None, {"b": []}]})


def test_same_seed_same_run() -> None:
    def run(seed: int) -> list[dict]:
        return FakeNNI(make_tuner(seed=seed), lambda c: ok(gflops(c)), order_seed=5).run(80).proposed

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_beats_random_search_maximizing() -> None:
    h.assert_beats_random(OpEvoTuner, MATMUL, gflops, 1.5, seeds=range(6))


def test_beats_random_search_minimizing() -> None:
    h.assert_beats_random(OpEvoTuner, MATMUL, gflops, 1.5, optimize_mode="minimize", seeds=range(6))


@pytest.mark.parametrize("mode", ["maximize", "minimize"])
def test_parents_are_the_fittest_in_either_mode(mode: str) -> None:
    tuner = make_tuner(TINY, optimize_mode=mode, parents_size=3, offspring_size=24, seed=0)
    params = tuner.generate_multiple_parameters(list(range(6)))
    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for pid, (config, value) in enumerate(zip(params, values)):
        tuner.receive_trial_result(pid, config, ok(value))
    expected = [9.0, 7.0, 5.0] if mode == "maximize" else [1.0, 2.0, 3.0]
    assert [v for _, v in tuner.parents()] == expected
    assert [c for c, _ in tuner.parents()] == [params[values.index(v)] for v in expected]


def test_selection_weights_follow_rank_or_fitness() -> None:
    assert make_tuner(optimize_mode="maximize")._weights([30.0, 29.0, 28.0]) == [3.0, 2.0, 1.0]
    assert make_tuner(optimize_mode="minimize")._weights([0.5, 2.0]) == [2.0, 1.0]
    fitness = {"selection": "fitness"}
    assert make_tuner(optimize_mode="maximize", **fitness)._weights([8.0, 2.0]) == [8.0, 2.0]
    assert make_tuner(optimize_mode="minimize", **fitness)._weights([0.5, 2.0]) == [2.0, 0.5]
    assert make_tuner(optimize_mode="minimize", **fitness)._weights([-3.0, 1.0, 4.0]) == [3.0, 2.0, 1.0]


def test_offspring_come_from_parents() -> None:
    # With mutation off every parameter of an offspring is inherited from one of the (equally fit) parents.
    tuner = make_tuner(parents_size=2, offspring_size=8, mutate_rate=0.0, seed=2)
    first = tuner.generate_multiple_parameters([0, 1])
    for pid, config in enumerate(first):
        tuner.receive_trial_result(pid, config, ok(10.0))
    children = tuner.generate_multiple_parameters(list(range(2, 6)))
    assert len(children) == 4
    for child in children:
        assert all(child[name] in (first[0][name], first[1][name]) for name in MATMUL)
        assert child not in first


def test_breeds_from_the_first_success() -> None:
    # One success among failures is enough to breed: the next generation are mutations of it.
    space = SearchSpace.from_json(MATMUL)
    tuner = make_tuner(parents_size=8, offspring_size=8, seed=3)
    first = tuner.generate_multiple_parameters(list(range(8)))
    tuner.receive_trial_result(0, first[0], ok(5.0))
    for pid in range(1, 8):
        tuner.receive_trial_result(pid, first[pid], h.INVALID)
    assert [c for c, _ in tuner.parents()] == [first[0]]
    children = tuner.generate_multiple_parameters(list(range(8, 16)))
    assert len(children) == 8
    near = statistics.mean(h.distance(space, child, first[0]) for child in children)
    far = statistics.mean(h.distance(space, other, first[0]) for other in first[1:])
    assert near < far / 3


def test_constrained_space() -> None:
    # Most of the space is beyond the device's limits: breeding from valid configs keeps trials valid.
    sc.assert_valid_and_better(OpEvoTuner, 5)


# ---- warm start --------------------------------------------------------------------------------------

def test_warm_start(tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    sc.assert_warm_start(OpEvoTuner, tmp_path, monkeypatch, caplog)


def test_warm_start_configs_become_the_first_parents(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    sc.recorded_store(tmp_path, monkeypatch)
    tuner = sc.warm_tuner(OpEvoTuner, parents_size=4)
    nni_ = FakeNNI(tuner, sc.constrained, concurrency=2)
    nni_.request(2)
    nni_.finish_one()
    nni_.finish_one()
    assert nni_.proposed == [sc.PEAK, sc.SECOND]
    assert [c for c, _ in tuner.parents()] == [sc.PEAK, sc.SECOND]


# ---- classArgs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    ({"optimize_mode": "max"}, "optimize_mode"),
    ({"parents_size": 0}, "parents_size"),
    ({"parents_size": 2.5}, "parents_size"),
    ({"offspring_size": -1}, "offspring_size"),
    ({"offspring_size": True}, "offspring_size"),
    ({"mutate_rate": 1.0}, "mutate_rate"),
    ({"mutate_rate": -0.1}, "mutate_rate"),
    ({"mutate_rate": "0.5"}, "mutate_rate"),
    ({"selection": "tournament"}, "selection"),
    ({"screen": 0}, "screen"),
    ({"screen": 2.0}, "screen"),
    ({"seed": "7"}, "seed"),
    *sc.BAD_COMMON_ARGS,
])
def test_bad_class_args(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        OpEvoTuner(**kwargs)


def test_bad_search_space_is_rejected() -> None:
    with pytest.raises(SpaceError, match="tile: unknown _type"):
        OpEvoTuner().update_search_space({"tile": {"_type": "randint", "_value": [0, 4]}})
    with pytest.raises(RuntimeError, match="update_search_space"):
        OpEvoTuner().generate_parameters(0)


# ---- screening offspring with a cost model -----------------------------------------------------------

def test_screened_proposals_are_valid_unique_and_reproducible() -> None:
    def run(seed: int) -> list[dict]:
        tuner = make_tuner(screen=6, seed=seed)
        return FakeNNI(tuner, lambda c: ok(gflops(c)), concurrency=4, order_seed=0).run(60).proposed

    proposed = run(1)
    assert len(set(keys(MATMUL, proposed))) == 60
    for config in proposed:
        SearchSpace.from_json(MATMUL).validate(config)
    assert run(1) == proposed


def test_screening_finds_better_kernels_sooner() -> None:
    # Median over seeds of the best after 48 trials: measuring the model's favourite of 8 offspring beats
    # measuring the first one bred.
    def best_by_48(screen: int) -> float:
        done = h.runs(OpEvoTuner, MATMUL, lambda c: ok(gflops(c)), 48, range(8), screen=screen)
        return statistics.median(max(run.values) for run in done)

    assert best_by_48(8) > best_by_48(1)


def test_screen_falls_back_to_the_first_offspring_without_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # screen 1 never builds the model, so the paper's OpEvo does not pay for one.
    def refuse(*args: Any) -> None:
        raise AssertionError("Surrogate built with screen 1")

    monkeypatch.setattr("tuners.opevo.Surrogate", refuse)
    FakeNNI(make_tuner(seed=1), lambda c: ok(gflops(c)), concurrency=4).run(40)


def test_cost_model_is_refitted_after_every_result_then_once_a_round(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fit's time grows with the history and NNI waits on the tuner: after every result while the history is
    # short (fewer than 2 x REFIT_ROUND), then once REFIT_ROUND more trials finished, not per result.
    monkeypatch.setattr("tuners.opevo.REFIT_ROUND", 16)
    sizes: list[int] = []  # the history's length at each fit
    fit = Surrogate.fit
    monkeypatch.setattr(Surrogate, "fit", lambda self, history: sizes.append(len(history)) or fit(self, history))
    FakeNNI(make_tuner(screen=4, seed=2), lambda c: ok(gflops(c)), concurrency=1).run(400)
    early = [n for n in sizes if n <= 32]
    assert early == list(range(early[0], 33))  # every result
    later = sizes[len(early):]
    assert later == list(range(48, 400, 16))  # one trial in flight: the first result past each round


def test_with_many_trials_in_flight_the_short_history_is_refitted_once_a_sixteenth_of_them_reported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 in flight are 64 results the model lacks anyway: refitting after each of them would cost NNI's dispatcher
    # a fit a result for little; after every 64 // 16 = 4th (about: the number in flight varies) it does not.
    fits: list[tuple[int, int]] = []  # (history length, trials in flight) at each fit
    fit, tuner = Surrogate.fit, make_tuner(screen=4, offspring_size=64, seed=2)
    monkeypatch.setattr(Surrogate, "fit", lambda self, history: fits.append((len(history), tuner.num_pending))
                        or fit(self, history))
    FakeNNI(tuner, lambda c: ok(gflops(c)), concurrency=64, order_seed=1).run(300)
    short = [(n, pending) for n, pending in fits if n < 128]
    assert len(short) > 8
    for (before, _), (after, pending) in zip(short, short[1:]):
        assert after - before >= max(1, pending // 16)


def test_screened_opevo_samples_then_breeds_one_offspring_until_its_model_ranks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing is bred before λ (parents_size) trials have finished; breeding `screen` offspring before the
    # model can rank them would be wasted repairs.
    tuner = make_tuner(screen=8, parents_size=2, seed=3)
    bred: list[int] = []  # results finished when each offspring was bred
    ranked: list[tuple[int, int]] = []  # (results finished, candidates) for each ranking
    breed, best = tuner._breed, Surrogate.best
    monkeypatch.setattr(tuner, "_breed", lambda *a: bred.append(len(tuner.history())) or breed(*a))
    monkeypatch.setattr(Surrogate, "best",
                        lambda self, c: ranked.append((len(tuner.history()), len(c))) or best(self, c))
    FakeNNI(tuner, lambda c: ok(gflops(c)), concurrency=1).run(30)
    assert [bred.count(n) for n in range(MIN_FIT)] == [0, 0] + [1] * (MIN_FIT - 2)
    assert [n for n, _ in ranked] == list(range(MIN_FIT, 30)) and {c for _, c in ranked} == {8}


def test_an_offspring_whose_repair_finds_no_valid_configuration_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    # A repair's descent can end far from every valid configuration (SpaceError); the run breeds another
    # offspring instead of failing the experiment.
    repair, calls = SearchSpace.repair, []

    def lost_every_third(self, config, rng):
        calls.append(1)
        if len(calls) % 3 == 0:
            raise SpaceError("found no configuration that keeps the rules near it")
        return repair(self, config, rng)

    monkeypatch.setattr(SearchSpace, "repair", lost_every_third)
    nni_ = FakeNNI(make_tuner(screen=4, seed=4), lambda c: ok(gflops(c)), concurrency=4).run(60)
    assert len(calls) > 60 and len(set(keys(MATMUL, nni_.proposed))) == len(nni_.proposed) == 60

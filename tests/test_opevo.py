"""OpEvoTuner driven in-process through the NNI 3.0 Tuner API, on synthetic matmul objectives."""
from __future__ import annotations

import json
import math
import statistics
import threading
from typing import Any

import nni
import pytest
import tuner_harness as h
from tuner_harness import MATMUL, FakeNNI, keys, no_checkpoint_dir, ok  # noqa: F401 - the fixture applies here too

from tuners.base import CHECKPOINT_ENV, RequestQueued, parse_metric
from tuners.opevo import OpEvoTuner
from searchspace import SearchSpace, SpaceError

TINY = h.TINY
BEST_TILES = {"K": [32, 8, 4], "X": [8, 4, 8, 2], "Y": [4, 16, 4, 4]}


def gflops(config: dict) -> float:
    """A smooth stand-in for kernel speed: peaks at BEST_TILES, falls off with log-distance of the tiles."""
    distance = sum((math.log2(a) - math.log2(b)) ** 2 for name, best in BEST_TILES.items()
                   for a, b in zip(config[name], best))
    unroll = {0: 0.6, 16: 0.8, 64: 1.0, 512: 0.7}[config["unroll"]]
    vec = {1: 0.5, 2: 0.8, 4: 1.0}[config["vec"]]
    return 1000.0 * math.exp(-distance / 8) * unroll * vec


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


def test_selection_weights_follow_fitness() -> None:
    assert make_tuner(optimize_mode="maximize")._weights([8.0, 2.0]) == [8.0, 2.0]
    assert make_tuner(optimize_mode="minimize")._weights([0.5, 2.0]) == [2.0, 0.5]
    assert make_tuner(optimize_mode="minimize")._weights([-3.0, 1.0, 4.0]) == [3.0, 2.0, 1.0]


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
    h.assert_valid_and_better(OpEvoTuner, 5)


# ---- warm start --------------------------------------------------------------------------------------

def test_warm_start(tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    h.assert_warm_start(OpEvoTuner, tmp_path, monkeypatch, caplog)


def test_warm_start_configs_become_the_first_parents(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    h.recorded_store(tmp_path, monkeypatch)
    tuner = h.warm_tuner(OpEvoTuner, parents_size=4)
    nni_ = FakeNNI(tuner, h.constrained, concurrency=2)
    nni_.request(2)
    nni_.finish_one()
    nni_.finish_one()
    assert nni_.proposed == [h.PEAK, h.SECOND]
    assert [c for c, _ in tuner.parents()] == [h.PEAK, h.SECOND]


# ---- NNI protocol ----------------------------------------------------------------------------------

def test_tiny_space_is_exhausted_after_each_config_once() -> None:
    assert SearchSpace.from_json(TINY).size == 24
    h.assert_exhausts_tiny(OpEvoTuner, concurrency=4, parents_size=3, offspring_size=4)


def test_exhaustion_while_trials_are_in_flight() -> None:
    tuner = make_tuner({"v": {"_type": "choice", "_value": [1, 2, 3]}}, parents_size=1, offspring_size=8)
    assert len(tuner.generate_multiple_parameters([0, 1, 2, 3, 4])) == 3
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(5)


def test_queued_requests_are_answered_through_st_callback() -> None:
    sent: list[tuple[int, dict]] = []
    tuner = make_tuner(offspring_size=2, seed=0)
    first = tuner.generate_multiple_parameters([0, 1, 2], st_callback=lambda pid, p: sent.append((pid, p)))
    assert len(first) == 2 and sent == []
    with pytest.raises(RequestQueued):
        tuner.generate_parameters(3)
    tuner.receive_trial_result(0, first[0], ok(10.0))
    assert [pid for pid, _ in sent] == [2]
    tuner.trial_end(0, True)
    tuner.trial_end(1, False)
    assert [pid for pid, _ in sent] == [2, 3]
    configs = first + [p for _, p in sent]
    assert len(set(keys(MATMUL, configs))) == 4
    assert tuner.num_pending == 2


def test_failed_trials_are_not_reproposed_nor_parents() -> None:
    # A failure that claims a huge metric (vec 4) must still not become a parent.
    tuner = make_tuner(seed=4, parents_size=4, offspring_size=4)
    nni_ = FakeNNI(tuner, h.failing(gflops, crash=lambda c: c["unroll"] == 512), order_seed=2).run(200)
    assert len(set(keys(MATMUL, nni_.proposed))) == len(nni_.proposed) == 200
    failed = [c for c, v in tuner.history() if v is None]
    assert any(c["vec"] == 4 for c in failed) and any(c["unroll"] == 512 for c in failed)
    assert all(c["vec"] != 4 and c["unroll"] != 512 for c, _ in tuner.parents())
    assert len(tuner.parents()) == 4
    assert all(v is not None for _, v in tuner.measured())


@pytest.mark.parametrize("optimize_mode", ["maximize", "minimize"])
def test_parents_are_the_fittest_best_first_oldest_first_among_equals(optimize_mode: str) -> None:
    tuner = make_tuner(parents_size=4, offspring_size=8, seed=0, optimize_mode=optimize_mode)
    configs = tuner.generate_multiple_parameters(list(range(8)))
    values = [3.0, 5.0, 1.0, 5.0, 2.0, 3.0, 4.0, 5.0]
    for pid, (config, value) in enumerate(zip(configs, values)):
        tuner.receive_trial_result(pid, config, ok(value))
    sign = 1 if optimize_mode == "maximize" else -1
    ranked = sorted(zip(configs, values), key=lambda item: sign * item[1], reverse=True)  # stable: oldest first
    assert tuner.parents() == ranked[:4]
    assert tuner.best() == ranked[0]
    assert tuner.top(100) == ranked
    # What they return are copies: changing them leaves the measurements as they were.
    tuner.parents()[0][0]["K"][0] = -1
    tuner.best()[0]["X"].append(7)
    assert tuner.parents() == ranked[:4] and tuner.measured() == list(zip(configs, values))


def test_results_are_paired_by_parameter_id() -> None:
    tuner = make_tuner(parents_size=8, seed=0)
    a, b = tuner.generate_multiple_parameters([0, 1])
    tuner.receive_trial_result(0, b, ok(5.0))  # NNI handed over the wrong parameters
    assert tuner.measured() == [(a, 5.0)]
    tuner.receive_trial_result(0, b, ok(6.0))  # the same id reporting twice changes nothing
    assert tuner.measured() == [(a, 5.0)]
    tuner.receive_trial_result(1, a, 7.0)  # a plain number is accepted too
    assert tuner.measured() == [(a, 5.0), (b, 7.0)]


def test_result_after_trial_end_upgrades_the_failure() -> None:
    tuner = make_tuner(seed=0)
    (a,) = tuner.generate_multiple_parameters([0])
    tuner.trial_end(0, True)
    assert tuner.history() == [(a, None)]
    tuner.receive_trial_result(0, a, ok(3.0))
    assert tuner.history() == [(a, 3.0)]


def test_parse_metric() -> None:
    assert parse_metric(3) == 3.0
    assert parse_metric({"default": 2, "status": "ok"}) == 2.0
    assert parse_metric({"default": 2}) == 2.0
    for failed in ({"default": 2, "status": "timeout"}, {"status": "ok"}, {"default": "fast"},
                   float("nan"), float("inf"), True, None, "12"):
        assert parse_metric(failed) is None


def test_concurrent_results_and_trial_ends() -> None:
    tuner = make_tuner(offspring_size=64, seed=0)
    lock = threading.Lock()
    proposed: list[dict] = []

    def callback(pid: int, params: dict) -> None:
        with lock:
            proposed.append(params)

    ids = list(range(64))
    proposed += tuner.generate_multiple_parameters(ids, st_callback=callback)
    errors: list[BaseException] = []

    def worker(part: list[int], end: bool) -> None:
        try:
            for pid in part:
                if end:
                    tuner.trial_end(pid, True)
                else:
                    tuner.receive_trial_result(pid, proposed[pid], ok(gflops(proposed[pid])))
                    answered = tuner.generate_multiple_parameters([1000 + pid], st_callback=callback)
                    with lock:
                        proposed.extend(answered)
        except BaseException as e:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(ids[i::4], end)) for i in range(4) for end in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(proposed) == 128
    assert len(set(keys(MATMUL, proposed))) == 128
    assert len(tuner.measured()) == 64 and tuner.num_pending == 64


# ---- resume ----------------------------------------------------------------------------------------

def test_resumed_tuner_does_not_repropose(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path))
    before = FakeNNI(make_tuner(seed=0), lambda c: ok(gflops(c)) if c["vec"] != 1 else None, order_seed=0)
    before.request(4)
    for _ in range(40):
        before.finish_one()
        before.request(1)
    assert len(before.running) == 4
    state = json.loads((tmp_path / "OpEvoTuner.state.json").read_text())
    assert len(state["records"]) == 44

    # A new process: same experiment directory, parameter ids restart at 0.
    resumed = make_tuner(seed=0)
    restored = resumed.history()
    assert len(restored) == 44
    assert sorted(v for _, v in restored if v is not None) == sorted(before.values)
    assert resumed.parents()
    after = FakeNNI(resumed, lambda c: ok(gflops(c)), order_seed=1).run(200)
    assert not set(keys(MATMUL, after.proposed)) & set(keys(MATMUL, before.proposed))


def test_import_data_alone_prevents_reproposals() -> None:
    source = make_tuner(seed=0, offspring_size=30)
    earlier = source.generate_multiple_parameters(list(range(30)))
    data = [{"parameter": c, "value": ok(gflops(c)) if i % 3 else {"default": 0, "status": "timeout"}}
            for i, c in enumerate(earlier)]
    data.append({"parameter": {"K": [1, 1, 1]}, "value": 1.0})  # from another search space: ignored
    resumed = make_tuner(seed=0)
    resumed.import_data(data)
    assert len(resumed.history()) == 30
    assert len(resumed.measured()) == 20
    after = FakeNNI(resumed, lambda c: ok(gflops(c))).run(150)
    assert not set(keys(MATMUL, after.proposed)) & set(keys(MATMUL, earlier))


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
    ({"seed": "7"}, "seed"),
    *h.BAD_WARM_ARGS,
])
def test_bad_class_args(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        OpEvoTuner(**kwargs)


def test_bad_search_space_is_rejected() -> None:
    with pytest.raises(SpaceError, match="tile: unknown _type"):
        OpEvoTuner().update_search_space({"tile": {"_type": "randint", "_value": [0, 4]}})
    with pytest.raises(RuntimeError, match="update_search_space"):
        OpEvoTuner().generate_parameters(0)

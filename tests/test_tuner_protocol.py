"""SpaceTuner's side of the NNI 3.0 protocol, with OpEvoTuner as the strategy: queued requests, pairing by
parameter id, failures, threads, and resume from the state file or from import_data."""
from __future__ import annotations

import json
import threading
from typing import Any

import nni
import pytest
import tuner_harness as h
from tuner_harness import MATMUL, FakeNNI, gflops, keys, no_checkpoint_dir, ok  # noqa: F401 - the fixture applies here too

from tuners.base import CHECKPOINT_ENV, RequestQueued
from tuners.gbfs import GBFSTuner
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner
from tuners.state import StateFile, parse_metric
from searchspace import SearchSpace

TINY = h.TINY


def make_tuner(space: dict = MATMUL, **kwargs: Any) -> OpEvoTuner:
    return h.make_tuner(OpEvoTuner, space, **kwargs)


@pytest.mark.parametrize("cls", [OpEvoTuner, GBFSTuner, NA2CTuner])
@pytest.mark.parametrize("sampling", ["uniform", "nearest"])
def test_random_configurations_follow_the_sampling_class_arg(cls: type, sampling: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    nearest = []
    draw = SearchSpace.sample_nearest
    monkeypatch.setattr(SearchSpace, "sample_nearest", lambda self, rng: nearest.append(1) or draw(self, rng))
    tuner = h.make_tuner(cls, MATMUL, sampling=sampling, seed=1)
    assert len(tuner.generate_multiple_parameters(list(range(4)))) == 4
    assert bool(nearest) == (sampling == "nearest")


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
    assert len(StateFile(tmp_path, "OpEvoTuner").load()) == 44

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


def measured(config: dict, value: float | None, parameter_id: int | None = None) -> dict:
    """A trial's report: what it measured (`params`) and its outcome (None: a failure)."""
    report = ok(value) if value is not None else {"default": 0.0, "status": "timeout", "reason": "slow"}
    return {**report, "params": config, "parameter_id": parameter_id}


def key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def outcomes(tuner: OpEvoTuner) -> dict[str, float | None]:
    """What the tuner holds for each configuration it saw finish."""
    return {key(c): v for c, v in tuner.history()}


def test_a_resumed_tuner_pairs_imported_results_with_what_each_trial_measured(tmp_path, monkeypatch) -> None:
    """NNI's import pairs a trial job's metric with the parameters NNI sent that job, which a parameter
    swap (microsoft/nni#5726) gave to another trial: the metric's `params` say what was measured."""
    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path))
    before = make_tuner(seed=0, offspring_size=4)
    a, b, c, d = before.generate_multiple_parameters([0, 1, 2, 3])
    before.receive_trial_result(0, a, measured(a, 1.5, 0))  # then the manager is killed, b c d in flight
    resumed = make_tuner(seed=0)
    resumed.import_data([
        {"parameter": a, "value": measured(a, 1.5, 0)},
        {"parameter": b, "value": measured(c, 4.85, 2)},  # job of b ran c's parameters
        {"parameter": c, "value": measured(c, 4.7, 2)},  # c ran twice: the first success stays
        {"parameter": d, "value": 3.0},  # a plain number (nnictl experiment import): NNI's parameter
        {"parameter": a, "value": measured({"K": [1, 1, 1]}, 9.0)},  # measured outside the space: ignored
    ])
    assert outcomes(resumed) == {key(a): 1.5, key(b): None, key(c): 4.85, key(d): 3.0}
    assert outcomes(make_tuner(seed=0)) == outcomes(resumed)  # and so does its state file


def test_a_live_result_goes_to_what_its_trial_measured() -> None:
    tuner = make_tuner(seed=0, offspring_size=4)
    a, b = tuner.generate_multiple_parameters([0, 1])
    tuner.receive_trial_result(0, a, measured(b, 3.0, 0))  # id 0 was issued a, but its trial built b
    assert outcomes(tuner) == {key(b): 3.0}
    assert tuner.num_pending == 2  # a is still in flight until its trial ends
    tuner.trial_end(0, True)
    tuner.receive_trial_result(1, b, measured(b, 5.0, 1))
    assert outcomes(tuner) == {key(b): 3.0, key(a): None}


def test_state_file_is_a_log_that_a_torn_line_or_a_bad_header_cannot_break(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path))
    run = FakeNNI(make_tuner(seed=0), lambda c: ok(gflops(c)), order_seed=0).run(12)
    state = StateFile(tmp_path, "OpEvoTuner")
    lines = state.path.read_text().splitlines()
    assert len(lines) > 13  # header, then a line per change: proposed, then measured
    assert {json.dumps(e.config, sort_keys=True): e.value for e in state.load()} == {
        json.dumps(c, sort_keys=True): v for c, v in zip(run.proposed, run.outcomes)}
    with state.path.open("a") as f:
        f.write('{"config": {"K": [1')  # a crash mid-append
    assert len(state.load()) == 12
    state.path.write_text('{"version": 1, "records": []}\n')
    assert state.load() == []  # unreadable: the run starts afresh, with a warning


def test_changing_the_search_space_rewrites_the_state(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path))
    tuner = make_tuner(seed=0)
    FakeNNI(tuner, lambda c: ok(gflops(c)), order_seed=0).run(20)
    narrower = {**MATMUL, "vec": {"_type": "choice", "_value": [2, 4]}}
    tuner.update_search_space(narrower)
    state = StateFile(tmp_path, "OpEvoTuner")
    kept = state.load()
    assert kept and all(e.config["vec"] != 1 for e in kept)
    assert len(state.path.read_text().splitlines()) == len(kept) + 1
    assert SearchSpace.from_json(json.loads(state.path.read_text().splitlines()[0])["search_space"]).names == list(narrower)

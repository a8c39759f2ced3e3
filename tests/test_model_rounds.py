"""One round of a task's NNI experiment (experiments/model/rounds.py): a failing round with nnictl and NNI's
REST API faked, then live experiments (experiments/model/live.py) through nnictl on the CPU."""
import json
import sqlite3
from contextlib import closing
from types import SimpleNamespace

import pytest
import yaml
from nni_experiment import free_port, managers, write_config

from experiments import manager
from experiments.model import live, rounds
from experiments.model.live import LivePool
from trial.workload import parse_name


@pytest.mark.parametrize("fails", ["create", "started", "trials", "resume"])
def test_a_round_that_fails_stops_its_experiment(tmp_path, monkeypatch, fails):
    """Once the experiment has an id, a failure anywhere in the round (the REST call after create or
    resume, the manifest's save in `started`) stops it; a create that gave no id has nothing to stop."""
    stopped = []

    def failing(name, value=None):
        def call(*args, **kwargs):
            if name == fails:
                raise RuntimeError(f"{name} failed")
            return value
        return call

    def nnictl(*args, check=True):
        if args[0] == "stop":
            stopped.append(args[1])

    monkeypatch.setattr(rounds.manager, "create", failing("create", "exp-new"))
    monkeypatch.setattr(rounds.manager, "resume", failing("resume"))
    monkeypatch.setattr(rounds.manager, "trials", failing("trials", []))
    monkeypatch.setattr(rounds.manager, "nnictl", nnictl)
    monkeypatch.setattr(rounds.manager, "profile", lambda port, exp: {"id": exp, "params": {"trialConcurrency": 2}})
    monkeypatch.setattr(rounds.manager, "update", lambda port, exp, key, value: None)
    runner = rounds.NniRounds(tmp_path, LivePool(free_port()))
    monkeypatch.setattr(runner, "prepare", lambda wl, trials: tmp_path / "config.yml")
    old = fails == "resume"
    with pytest.raises(RuntimeError, match=f"{fails} failed"):
        runner(parse_name("mm/N64K64M64"), "exp-old" if old else None, 4, 60.0, failing("started"))
    expected = {"create": [], "started": ["exp-new"], "trials": ["exp-new"], "resume": ["exp-old", "exp-old"]}
    assert stopped == expected[fails]


def test_the_experiments_are_written_with_the_concurrency_given(tmp_path):
    config = yaml.safe_load(rounds.NniRounds(tmp_path, LivePool(free_port()), concurrency=16)
                            .prepare(parse_name("mm/N64K64M64"), 64).read_text())
    assert config["trialConcurrency"] == 16 == config["tuner"]["classArgs"]["offspring_size"]
    assert config["maxTrialNumber"] == 64


# -- live experiments, through nnictl ----------------------------------------------------------------------

MM, CONV = parse_name("mm/N64K64M64"), parse_name("conv/N1C4HW8F8K3ST1PD1")


def overlapping(port, first):
    """Whether two of the experiment's trials from sequence number `first` on ran at the same time."""
    spans = sorted((job["startTime"], job["endTime"]) for job in manager._api(port, "/trial-jobs")
                   if job.get("sequenceId", 0) >= first and "startTime" in job and "endTime" in job)
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


def test_a_second_round_raises_the_budget_of_the_running_experiment(tmp_path):
    """No resume: the same manager process, started once, holds both rounds' trials, and the raised round
    has its trials in flight together (a raised budget alone leaves a finished experiment idle)."""
    created = []
    with LivePool(free_port()) as pool:
        runner = rounds.NniRounds(tmp_path, pool, concurrency=2)
        first = runner(MM, None, 2, 300.0, created.append)
        port = pool.get(first.experiment).port
        before, pid = manager.profile(port, first.experiment), managers([first.experiment])
        second = runner(MM, first.experiment, 6, 300.0, created.append)
        after = manager.profile(port, first.experiment)
        assert created == [first.experiment] == [second.experiment]
        assert (first.trials, second.trials) == (2, 6) == (2, len(manager.trials(port)))
        assert after["startTime"] == before["startTime"] and managers([first.experiment]) == pid != {}
        assert after["params"]["maxTrialNumber"] == 6 and manager.status(port) == "DONE"
        assert overlapping(port, 2)
    assert managers([first.experiment]) == {}  # the pool's close stopped it


def test_past_the_bound_the_least_recently_used_stops_and_resumes_with_its_trials(tmp_path):
    """Bound 2: a, b, then a again (live), so c stops b, the least recently used, not a, the first
    started; b's next round resumes it with its first trials kept, and stops a, now the least recent."""
    said = []
    with LivePool(free_port(), limit=2, say=said.append) as pool:
        runner = rounds.NniRounds(tmp_path, pool, concurrency=2)
        a = runner(MM, None, 2, 300.0, lambda exp: None)
        b = runner(CONV, None, 2, 300.0, lambda exp: None)
        b_trials = [r.trial_id for r in manager.trials(pool.get(b.experiment).port)]
        assert runner(MM, a.experiment, 4, 300.0, lambda exp: None).trials == 4
        c = runner(parse_name("mm/N32K32M32"), None, 2, 300.0, lambda exp: None)
        assert set(managers([a.experiment, b.experiment, c.experiment])) == {a.experiment, c.experiment}
        assert any(f"stopped experiment {b.experiment}" in line and "least recently used" in line for line in said)
        again = runner(CONV, b.experiment, 4, 300.0, lambda exp: None)
        assert again.experiment == b.experiment and again.trials == 4
        assert [r.trial_id for r in manager.trials(pool.get(b.experiment).port)][:2] == b_trials
        assert set(managers([a.experiment, b.experiment, c.experiment])) == {b.experiment, c.experiment}
    assert managers([a.experiment, b.experiment, c.experiment]) == {}


def test_a_left_over_experiment_is_stopped_with_its_concurrency_set_back(tmp_path):
    """A killed tune's live experiment, its trialConcurrency raised by its rounds, is stopped by the next
    tune with the configured concurrency stored, which its resume asks the tuner for."""
    config = write_config(tmp_path, "mm/N64K64M64", "opevo", 2, concurrency=2)
    port = free_port()
    exp_id = manager.create(config, port)
    try:
        manager.update(port, exp_id, "trialConcurrency", 6)
        assert live.stop_left_over([exp_id, "nosuchexp"], 2) == [exp_id]
        assert managers([exp_id]) == {} and live.running([exp_id]) == {}
    finally:
        manager.nnictl("stop", exp_id, check=False)
    db = tmp_path / "nni" / exp_id / "db" / "nni.sqlite"
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (params,) = conn.execute("SELECT params FROM ExperimentProfile ORDER BY revision DESC LIMIT 1").fetchone()
    assert json.loads(params)["trialConcurrency"] == 2


@pytest.mark.parametrize("free_gib, bound", [(2, 8), (20, 20), (500, 32)])
def test_the_bound_on_live_experiments_follows_free_memory(monkeypatch, free_gib, bound):
    """A GiB of free memory per live experiment, never fewer than 8 nor more than 32; a pool built
    without a bound takes it."""
    monkeypatch.setattr(live.psutil, "virtual_memory", lambda: SimpleNamespace(available=free_gib << 30))
    assert live.live_bound() == bound
    assert LivePool(free_port()).limit == bound

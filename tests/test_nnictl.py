"""End to end: `nnictl create` on a tiny CPU experiment with OpEvo, then `nnictl stop` + `nnictl resume`."""
import json
import socket

import pytest
import yaml

from trial import space, tune
from trial.measure import STATUSES
from trial.records import Records
from trial.workload import parse
from tuners.space import from_twin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def experiment(tmp_path):
    """A generated mm/N64K64M64 OpEvo experiment of 8 trials, 2 at a time, kept under tmp_path."""
    folder = space.write(parse("mm", "N64K64M64"), tmp_path / "experiments", max_trials=8, concurrency=2)
    config_path = folder / "config_opevo.yml"
    config = yaml.safe_load(config_path.read_text())
    config["experimentWorkingDirectory"] = str(tmp_path / "nni")
    config["tuner"]["classArgs"]["seed"] = 1
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    started = []
    yield config_path, port, started
    for exp_id in started:
        tune.nnictl("stop", exp_id, check=False)


def check_pairing(records, state_file):
    """Each trial reports the params it received; the tuner recorded each result against those params.

    `records` are the trials of one run: NNI numbers parameters from 0 again after a resume.
    """
    sent = {r.parameter_id: r.parameters for r in records}
    tuner_values = {json.dumps(rec["config"], sort_keys=True): rec["value"]
                    for rec in json.loads(state_file.read_text())["records"]}
    for r in records:
        assert r.status == "SUCCEEDED" and r.metric is not None, r
        assert r.metric["status"] in STATUSES
        assert r.metric["params"] == sent[r.metric["parameter_id"]]
        key = json.dumps(r.metric["params"], sort_keys=True)
        if r.metric["status"] == "ok":
            assert tuner_values[key] == pytest.approx(r.metric["gflops"])
        else:
            assert tuner_values[key] is None


def assert_no_repeats(records):
    configs = [json.dumps(r.parameters, sort_keys=True) for r in records]
    assert len(set(configs)) == len(configs), "a configuration was proposed twice"


def check_records(records, exp_id, tmp_path):
    """Every trial kept its measurement; the experiment imports into a fresh store the same way."""
    kept = Records().query(workload="mm/N64K64M64PNN")
    mine = {r.trial: r for r in kept if r.experiment == exp_id}
    assert set(mine) == {r.trial_id for r in records}
    assert {r.tuner for r in mine.values()} == {"opevo"}
    for r in records:
        assert mine[r.trial_id].status == r.metric["status"] and mine[r.trial_id].params == r.metric["params"]
    fresh = Records(tmp_path / "imported.sqlite")
    assert fresh.import_experiment(tmp_path / "nni" / exp_id) == len(records)
    assert fresh.import_experiment(tmp_path / "nni" / exp_id) == 0
    best = fresh.best("mm/N64K64M64PNN")[0]
    assert best.gflops == max(r.metric["gflops"] for r in records) and best.tuner == "opevo"


def test_create_runs_to_done_then_resume_continues(experiment, tmp_path):
    config_path, port, started = experiment
    exp_id = tune.create(config_path, port)
    started.append(exp_id)
    assert tune.wait(port, timeout_s=300, poll_s=2) == "DONE"
    first = tune.trials(port)
    assert len(first) == 8
    state_file = tmp_path / "nni" / exp_id / "checkpoint" / "OpEvoTuner.state.json"
    check_pairing(first, state_file)
    assert_no_repeats(first)
    assert any(r.metric["status"] == "ok" for r in first)
    check_records(first, exp_id, tmp_path)

    tune.nnictl("stop", exp_id)
    tune.nnictl("resume", exp_id, "--port", str(port))
    tune.nnictl("update", "trialnum", exp_id, "--value", "14")
    assert tune.wait(port, timeout_s=300, poll_s=2) == "DONE"
    both = tune.trials(port)
    assert len(both) == 14
    old = {r.trial_id for r in first}
    assert old <= {r.trial_id for r in both}
    check_pairing([r for r in both if r.trial_id not in old], state_file)
    assert_no_repeats(both)


@pytest.mark.parametrize("tuner", ["gbfs", "na2c", "tpe"])
def test_other_tuners_run_to_done(tuner, tmp_path):
    """G-BFS and N-A2C on the suite's space, TPE on its standard-type twin, through nnictl create."""
    wl = parse("mm", "N64K64M64")
    folder = space.write(wl, tmp_path / "experiments", max_trials=6, concurrency=2)
    config_path = folder / f"config_{tuner}.yml"
    config = yaml.safe_load(config_path.read_text())
    config["experimentWorkingDirectory"] = str(tmp_path / "nni")
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    exp_id = tune.create(config_path, port)
    try:
        assert tune.wait(port, timeout_s=300, poll_s=2) == "DONE"
        records = tune.trials(port)
    finally:
        tune.nnictl("stop", exp_id, check=False)
    assert len(records) == 6
    native = json.loads((folder / "search_space.json").read_text())
    sent = {r.parameter_id: r.parameters for r in records}  # jobs may run each other's (NNI #5726)
    for r in records:
        assert r.status == "SUCCEEDED" and r.metric and r.metric["status"] in STATUSES
        assert r.metric["params"] == from_twin(native, sent[r.metric["parameter_id"]])
    assert any(r.metric["status"] == "ok" for r in records)

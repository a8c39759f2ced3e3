"""One record per trial of an experiment, the measurement NNI holds: a trial run again replaces its record,
an orphaned trial (its NNI manager killed) records nothing, and an import takes a trial's last result."""
import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from trial import __main__ as trial_main
from trial.records import Records
from trial.records.nni_import import import_experiment
from trial.results import MeasureResult
from trial.service import client, nnitrial
from trial.workload import parse

WL = parse("mm", "N32K32M32")
KNOBS = {"K": [1, 2, 4, 4], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": 0, "vec": 1, "pipeline": 2,
         "kmajor": 0, "pad": 0}


def result(gflops: float) -> MeasureResult:
    return MeasureResult("ok", "", KNOBS, gflops, 1.0 / gflops, 0.0, 0.1, "llvm", "cpu")


def test_a_trial_recorded_again_replaces_its_record(tmp_path):
    store = Records(tmp_path / "r.sqlite")
    assert store.append(WL, result(2.0), "exp", "t1", "opevo")
    assert store.append(WL, result(3.0), "exp", "t1", "opevo")  # NNI's re-run of t1 after a resume
    assert not store.append(WL, result(3.0), "exp", "t1", "opevo")  # the same measurement again
    assert store.append(WL, result(3.0), "exp", "t2", "opevo")
    assert [(r.trial, r.gflops) for r in store.query(best_first=True)] == [("t1", 3.0), ("t2", 3.0)]
    assert store.append(WL, result(1.0)) and store.append(WL, result(1.0))  # by hand: every one kept
    assert store.count() == 4


def fake_experiment(folder, finals):
    """An NNI experiment folder whose database holds `finals`: (timestamp, trial id, metric) rows."""
    (folder / "db").mkdir(parents=True)
    with closing(sqlite3.connect(folder / "db" / "nni.sqlite")) as db, db:
        db.execute("CREATE TABLE ExperimentProfile (params text, revision integer)")
        db.execute("CREATE TABLE MetricData (timestamp integer, trialJobId text, parameterId text, type text,"
                   " sequence integer, data text)")
        db.execute("INSERT INTO ExperimentProfile VALUES (?, 1)",
                   (json.dumps({"trialCommand": "python3 -m trial mm N32K32M32 --tuner opevo"}),))
        for timestamp, trial, metric in finals:
            db.execute("INSERT INTO MetricData VALUES (?, ?, '0', 'FINAL', 0, ?)",
                       (timestamp, trial, json.dumps(json.dumps(metric))))


def test_an_import_takes_the_last_final_result_of_a_trial(tmp_path):
    first, again = result(2.0).report(0), result(3.0).report(0)
    fake_experiment(tmp_path / "exp1", [(1, "t1", first), (1, "t2", first), (2, "t1", again)])
    store = Records(tmp_path / "r.sqlite")
    assert import_experiment(store, tmp_path / "exp1") == 2
    assert import_experiment(store, tmp_path / "exp1") == 0
    assert {r.trial: r.gflops for r in store.query()} == {"t1": 3.0, "t2": 2.0}


@pytest.fixture
def under_nni(monkeypatch, tmp_path):
    """`python -m trial` as NNI starts it, measuring nothing: its measurement is `result(2.0)`."""
    monkeypatch.setenv("NNI_PLATFORM", "local")
    monkeypatch.setenv("NNI_EXP_ID", "exp")
    monkeypatch.setenv("NNI_TRIAL_JOB_ID", "t1")
    monkeypatch.setattr(nnitrial, "receive", lambda: (KNOBS, 7))
    monkeypatch.setattr(trial_main, "measure", lambda wl, params, options: result(2.0))
    return Records(tmp_path / "r.sqlite")


def test_a_trial_records_only_what_nni_took(under_nni, monkeypatch, capsys):
    sent = []
    monkeypatch.setattr(nnitrial, "report", lambda metric, pid: sent.append((metric["params"], pid)))
    assert trial_main.main(["mm", "N32K32M32", "--records", str(under_nni.path)]) == 0
    assert sent == [(KNOBS, 7)]

    def manager_gone(metric, pid):  # its channel refuses (or `report` finds the trial orphaned)
        raise nnitrial.ChannelError("NNI's trial channel http://localhost:8110/trial-channel/t2: Connection refused")

    monkeypatch.setattr(nnitrial, "report", manager_gone)
    monkeypatch.setenv("NNI_TRIAL_JOB_ID", "t2")
    assert trial_main.main(["mm", "N32K32M32", "--records", str(under_nni.path)]) == 1
    assert "runs this trial again when the experiment is resumed" in capsys.readouterr().err
    assert [(r.experiment, r.trial, r.gflops) for r in under_nni.query()] == [("exp", "t1", 2.0)]


def test_a_trial_whose_manager_died_does_not_report(monkeypatch):
    """NNI's trial channel URL names the manager's port and the trial id, both of which a resumed manager
    reuses: a report must not reach it."""
    monkeypatch.setenv("NNI_TRIAL_COMMAND_CHANNEL", "http://localhost:8110/trial-channel/t1")
    asked = []
    monkeypatch.setattr(client, "request", lambda m: asked.append(m["request"]) or
                        {"parameters": KNOBS, "parameter_id": 7})
    manager = FakeProcess(200)
    monkeypatch.setattr(nnitrial, "_lineage", lambda: [FakeProcess(300), manager])
    assert nnitrial.receive() == (KNOBS, 7)
    nnitrial.report({"default": 2.0}, 7)  # the manager (pid 200) still runs
    manager.running = False
    with pytest.raises(nnitrial.Orphaned, match=r"has gone .*\[300, 200\], \[200\] no longer run"):
        nnitrial.report({"default": 2.0}, 7)
    assert asked == ["nni_receive", "nni_report"]


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid, self.running = pid, True

    def is_running(self) -> bool:
        return self.running


def test_the_lineage_ends_at_nni_manager():
    """What lies above NNI's manager (an `nnictl create` that exits once the manager answers) is left out, so
    its exit does not read as the manager's; the manager is known by its command line."""
    probe = "from trial.service import nnitrial; import os; print([p.pid for p in nnitrial._lineage()], os.getppid())"
    outer = ("import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', sys.argv[1]]).returncode)")
    done = subprocess.run([sys.executable, "-c", outer, probe, nnitrial.MANAGER_MARK + "/main.js"],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    lineage, parent = done.stdout.split("] ")
    assert lineage + "]" == f"[{parent.strip()}]"  # the marked parent, and nothing above it

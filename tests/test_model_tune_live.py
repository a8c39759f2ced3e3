"""A model's tuning leaves no NNI experiment running, however it ends, and a killed one's leftovers do not
stop the next (experiments/model/tune.py with live.py), through nnictl on the CPU."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from model_fixtures import Task
from nni_experiment import free_port, managers

from experiments.manager import nnictl
from experiments.model import tune as model_tune
from experiments.model.manifest import Manifest


TASKS = [Task("mm/N64K64M64", 3, 0.05, 0.6), Task("conv/N1C4HW8F8K3ST1PD1", 1, 0.05, 0.4)]


def experiments(out):
    return [e.experiment for e in Manifest.load(out).entries]


def test_an_exception_between_rounds_stops_every_live_experiment(tmp_path, monkeypatch):
    """Both warm-up rounds leave their experiments running; the scheduler failing at the third pick
    stops them both on the way out."""
    picks, pick = [], model_tune.pick

    def failing(progress):
        picks.append(progress)
        if len(picks) == 3:
            raise RuntimeError("the scheduler failed")
        return pick(progress)

    monkeypatch.setattr(model_tune, "pick", failing)
    with pytest.raises(RuntimeError, match="the scheduler failed"):
        model_tune.tune(TASKS, tmp_path, 12, None, target="llvm", port=free_port())
    ids = experiments(tmp_path)
    assert all(ids) and len(set(ids)) == 2
    assert managers(ids) == {}


def test_a_killed_tune_leaves_managers_that_the_next_tune_stops_and_resumes(tmp_path):
    """SIGKILL after the warm-up rounds: the experiments outlive the process (no `close` runs), on the
    web-UI ports the next tune takes.  That tune, with budget for one more round (so one task's
    experiment gets no round to resume it), stops both, resumes one, spends the budget and leaves
    nothing running."""
    port = free_port()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_model_tune_live import TASKS
        from experiments.model import tune
        tune.tune(TASKS, {str(tmp_path)!r}, 16, None, target="llvm", port={port})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 240
        while not ((m := Manifest.load(tmp_path)) and m.spent >= 8):  # both warm-up rounds of 4 done
            assert proc.poll() is None and time.monotonic() < deadline, "the first tune ended or stalled"
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    ids = experiments(tmp_path)
    try:
        assert set(managers(ids)) == set(ids) and all(ids)  # left running by the killed process
        done = model_tune.tune(TASKS, tmp_path, 12, None, target="llvm", port=port)
        assert done["trials"] == 12 and [r["experiment"] for r in done["tasks"]] == ids
        assert managers(ids) == {}
    finally:  # none left behind by a failure here
        for exp_id in managers(ids):
            nnictl("stop", exp_id, check=False)

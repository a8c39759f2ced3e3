"""End to end: NNI's manager killed (SIGKILL) with four trials in flight, then `nnictl resume`.

Afterwards the tuner's state, the records store and NNI's final metrics must agree on what each
configuration measured, and so must a tuner that has only what NNI imports on resume (its state file
lost): NNI hands trials each other's parameters at 4 in flight (microsoft/nni#5726; most runs, not
every one: tests/test_tuner_protocol.py pairs swapped results deterministically), so NNI's results go
with the `params` each trial measured; and the trials orphaned by the kill, which NNI re-runs under the
same ids, must leave no record of their own.
"""
import json
import sqlite3
import time
from collections import defaultdict
from contextlib import closing

import psutil
import yaml
from nni.tools.nnictl.config_utils import Experiments
from nni_experiment import free_port, log_tail, running, write_config

from experiments import tune
from trial.records import Records
from trial.records.store import decode_metric, params_key
from trial.workload import parse_name
from tuners.opevo import OpEvoTuner
from tuners.state import OK, StateFile

WORKLOAD = "mm/N64K64M64"
KEY = parse_name(WORKLOAD).key


def nni_finals(folder):
    """{trial id: its last final metric} from NNI's own database (readable with the manager dead)."""
    with closing(sqlite3.connect(f"file:{folder / 'db' / 'nni.sqlite'}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT trialJobId, data FROM MetricData WHERE type = 'FINAL'"
                          " ORDER BY timestamp, rowid").fetchall()
    return {trial: decode_metric(data) for trial, data in rows}


def recorded(exp_id):
    """{trial id: (params, status, gflops)} of the experiment's records."""
    return {r.trial: (params_key(r.params), r.status, r.gflops)
            for r in Records().query(workload=KEY) if r.experiment == exp_id}


def as_recorded(finals):
    return {trial: (params_key(m["params"]), m["status"], m["gflops"]) for trial, m in finals.items()}


def assert_agrees(held, measured):
    """A tuner's outcomes ({configuration: value, None if failed}) are what was measured, config by config.

    A configuration measured more than once (NNI can hand two trials the same parameters) may hold any
    of its successful values: a tuner keeps the first success it is told of.
    """
    for config, values in measured.items():
        successes = [v for v in values if v is not None]
        assert config in held and (held[config] in successes if successes else held[config] is None), \
            (config, held.get(config, "never told"), values)
    for config, value in held.items():  # nothing held as measured so that was not
        assert value is None or value in measured.get(config, []), (config, value, measured.get(config))


def slow_trials(config):
    """Trials that time for about 4 s (5 repeats of at least 800 ms), so that 4 are caught measuring."""
    loaded = yaml.safe_load(config.read_text())
    loaded["trialCommand"] += " --repeat 5 --min-repeat-ms 800"
    config.write_text(yaml.safe_dump(loaded))


def kill_manager_mid_run(exp_id, port, timeout_s=300):
    """SIGKILL the experiment's NNI manager once 4 trials ended and 4 run; wait for all it started to end.

    The orphaned trials run on (nothing stops them) and end when they cannot report; the test resumes
    only then, so the orphans' fate does not depend on how fast the resume comes.
    """
    manager = psutil.Process(Experiments().get_all_experiments()[exp_id]["pid"])
    assert "main.js" in " ".join(manager.cmdline()), manager.cmdline()
    deadline = time.monotonic() + timeout_s
    while True:
        trials = tune.trials(port)
        in_flight = [t for t in trials if t.status == "RUNNING"]
        if sum(t.metric is not None for t in trials) >= 4 and len(in_flight) == 4:
            break
        assert time.monotonic() < deadline, f"never 4 trials in flight: {trials}"
        time.sleep(0.2)
    time.sleep(1.5)  # the trials in flight receive their parameters and start measuring
    started = manager.children(recursive=True)
    manager.kill()
    manager.wait(30)
    _, alive = psutil.wait_procs(started, timeout=180)
    assert not alive, f"processes of the killed manager still run: {alive}"
    return {t.trial_id for t in in_flight}


def test_killed_manager_then_resume_keeps_tuner_records_and_nni_in_agreement(tmp_path):
    config = write_config(tmp_path, WORKLOAD, "opevo", trials=12, concurrency=4, seed=1)
    slow_trials(config)
    port = free_port()
    with running(config, port) as exp_id:
        folder = tmp_path / "nni" / exp_id
        orphans = kill_manager_mid_run(exp_id, port)
        at_kill = nni_finals(folder)
        assert orphans - set(at_kill), "every trial in flight had reported before the kill"
        # The orphans measured (most of them) but NNI never had their results: they recorded nothing.
        assert recorded(exp_id) == as_recorded(at_kill)

        tune.nnictl("resume", exp_id, "--port", str(port))
        assert tune.wait(port, timeout_s=400, poll_s=2) == "DONE", log_tail(config, exp_id)
        jobs = tune.trials(port)
        exported = tune._api(port, "/export-data")  # what NNI imports into a resumed tuner
    assert len(jobs) == 12 and orphans <= {j.trial_id for j in jobs}
    finals = nni_finals(folder)
    assert set(finals) == {j.trial_id for j in jobs}
    # Records and NNI, trial by trial: the orphans' re-runs are what both hold.
    assert recorded(exp_id) == as_recorded(finals)

    measured = defaultdict(list)  # configuration -> the values NNI and the records hold for it
    for metric in finals.values():
        measured[params_key(metric["params"])].append(metric["gflops"] if metric["status"] == "ok" else None)
    restored = StateFile(folder / "checkpoint", "OpEvoTuner").load()
    assert_agrees({params_key(e.config): e.value if e.state == OK else None for e in restored}, measured)
    # A tuner whose state file is lost has only what NNI imports into it on resume (its export).
    fresh = OpEvoTuner(seed=1)
    fresh.update_search_space(json.loads((config.parent / "search_space.json").read_text()))
    fresh.import_data([{**e, "value": json.loads(e["value"]) if isinstance(e["value"], str) else e["value"]}
                       for e in exported])  # as NNI's dispatcher decodes them (handle_import_data)
    assert_agrees({params_key(c): v for c, v in fresh.history()}, measured)
    swapped = [j for j in jobs if j.metric and params_key(j.metric["params"]) != params_key(j.parameters)]
    print(f"{len(swapped)} of {len(jobs)} trials measured another configuration than NNI's parameter")

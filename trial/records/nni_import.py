"""Import of an NNI experiment's results into the records store: trials run elsewhere, or before the
store existed, become records like any other."""
from __future__ import annotations

import json
import os
import re
import sqlite3
from contextlib import closing
from pathlib import Path

from ..command import read_trial_command
from ..results import MeasureResult
from ..workload import parse_name
from .store import Records, decode_metric


def import_experiment(store: Records, experiment_dir: str | os.PathLike[str], workload: str | None = None) -> int:
    """Add the final results of an NNI experiment folder (<nni dir>/<id>); returns how many records changed.

    The workload is read from the experiment's trialCommand (`... -m trial <op> <spec>`) unless given.
    A trial that NNI ran again after a resume can hold two final results; its last one is the trial's,
    as in NNI's own export (and as `Records.append` keeps one record per trial).
    """
    folder = Path(experiment_dir)
    with closing(sqlite3.connect(f"file:{folder / 'db' / 'nni.sqlite'}?mode=ro", uri=True)) as nni_db:
        profile = json.loads(nni_db.execute("SELECT params FROM ExperimentProfile ORDER BY revision DESC"
                                            " LIMIT 1").fetchone()[0])
        rows = nni_db.execute("SELECT trialJobId, data FROM MetricData WHERE type = 'FINAL'"
                              " ORDER BY timestamp, rowid").fetchall()
    metrics = dict(rows)  # the last final result of each trial
    command = profile.get("trialCommand", "")
    found = read_trial_command(command)
    if workload is None:
        if not found:
            raise ValueError(f"cannot tell the workload from trialCommand {command!r}; name it")
        workload = "/".join(found[:2])
    wl = parse_name(workload)
    tuner = found[2] if found else None
    new = 0
    for trial_id, data in metrics.items():
        metric = decode_metric(data)
        if not isinstance(metric, dict) or "status" not in metric:
            continue  # not a trial of this suite
        device = re.sub(r" \(device \d+\)$", "", metric.get("device", ""))
        result = MeasureResult(metric["status"], metric.get("reason", ""), metric.get("params"),
                               metric.get("gflops", 0.0), metric.get("latency_ms"),
                               metric.get("latency_std_ms"), metric.get("build_s"), metric.get("target", ""),
                               device, warning=metric.get("warning", ""))
        new += store.append(wl, result, folder.name, trial_id, tuner)
    return new

"""The NNI manager of an experiment, through nnictl and its REST API (the data the web UI shows).

`create` starts an experiment as a user would (`nnictl create --config ...`), `wait` follows it to
its end, `trials` reads what each trial received and reported, and `tuner_failure` finds why a tuner
stopped (dispatcher.log, served by the manager at /logs/dispatcher.log).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from trial.records import decode_metric
from trial.results import Status

FINISHED = ("DONE", "ERROR", "STOPPED")
ACTIVE = ("WAITING", "RUNNING", "UNKNOWN")


@dataclass
class TrialRecord:
    trial_id: str
    status: str  # NNI's job status: SUCCEEDED, FAILED, RUNNING, ...
    parameter_id: int | None  # the id NNI sent with the parameters this trial received
    parameters: dict[str, Any] | None
    metric: dict[str, Any] | None  # what the trial reported (our report dict)
    sequence: int = 0  # NNI's trial number, from 0 in the order the trials were created


class TunerFailed(RuntimeError):
    """The tuner stopped with an error (its message), while NNI may still say RUNNING."""


def _api(port: int, path: str) -> Any:
    resp = requests.get(f"http://127.0.0.1:{port}/api/v1/nni{path}", timeout=10)
    resp.raise_for_status()
    return resp.json()


def _env() -> dict[str, str]:
    """nnictl and the trials it starts use this interpreter's environment (its bin dir first on PATH)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


START_ATTEMPTS = 3
"""nnictl create gives the NNI manager it starts 3 s to answer (NNI 3.0, `nni.experiment.launcher`:
`_check_rest_server` with 3 retries a second apart) and otherwise kills it and fails: on a loaded machine
the manager is sometimes slower than that, so such a start is tried again."""


def nnictl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run nnictl with this interpreter; with `check`, a failure raises with nnictl's own words."""
    done = subprocess.run([sys.executable, "-m", "nni.tools.nnictl.nnictl", *args], env=_env(),
                          capture_output=True, text=True, timeout=300)
    if check and done.returncode:
        raise _failed(args, done)
    return done


def _failed(args: tuple[str, ...], done: subprocess.CompletedProcess) -> RuntimeError:
    return RuntimeError(f"nnictl {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def _manager_too_slow(done: subprocess.CompletedProcess) -> bool:
    """Whether nnictl create failed only because the NNI manager did not answer its status check in time."""
    return done.returncode != 0 and "/check-status" in done.stdout + done.stderr


def create(config: Path, port: int) -> str:
    """Start the experiment; returns its id.  A start whose manager answered too late is tried again
    (`START_ATTEMPTS`); any other failure raises at once."""
    _start("create", "--config", str(config), "--port", str(port))
    return _api(port, "/experiment")["id"]


def resume(exp_id: str, port: int) -> None:
    """Start a stopped experiment again (`nnictl resume`), retried as `create` is."""
    _start("resume", exp_id, "--port", str(port))


def _start(*args: str) -> None:
    for attempt in range(1, START_ATTEMPTS + 1):
        done = nnictl(*args, check=False)
        if not _manager_too_slow(done) or attempt == START_ATTEMPTS:
            break
        print(f"nnictl {args[0]}: the NNI manager did not answer within nnictl's 3 s (attempt {attempt} of "
              f"{START_ATTEMPTS}); starting it again", file=sys.stderr)
        time.sleep(attempt)
    if done.returncode:
        raise _failed(args, done)


UPDATE_TYPES = {"maxTrialNumber": "MAX_TRIAL_NUM", "trialConcurrency": "TRIAL_CONCURRENCY"}
"""The profile keys `update` sets, with the manager's update_type for each (NNI 3.0, nnictl/updater.py)."""


def profile(port: int, exp_id: str) -> dict[str, Any]:
    """The experiment profile served on `port`, after checking it is `exp_id`'s: a port is only a number,
    and after a restart another experiment (or another user's) may hold it."""
    found = _api(port, "/experiment")
    if found.get("id") != exp_id:
        raise RuntimeError(f"port {port} serves experiment {found.get('id')!r}, not {exp_id}")
    return found


def update(port: int, exp_id: str, key: str, value: int) -> None:
    """Set `key` (maxTrialNumber or trialConcurrency) of the running experiment `exp_id`, as
    `nnictl update trialnum|concurrency` does, without the start-up of an nnictl process."""
    put(port, profile(port, exp_id), {key: value})


def put(port: int, found: dict[str, Any], values: dict[str, int]) -> None:
    """Set `values` (of `UPDATE_TYPES`) in the profile `found` (`profile`'s) of the experiment on `port`: the
    whole profile PUT back once a key, with that key's update_type, as nnictl does."""
    unknown = set(values) - set(UPDATE_TYPES)
    if unknown:
        raise ValueError(f"cannot update {', '.join(sorted(unknown))}: one of {', '.join(UPDATE_TYPES)}")
    for key, value in values.items():
        found["params"][key] = value
        resp = requests.put(f"http://127.0.0.1:{port}/api/v1/nni/experiment?update_type={UPDATE_TYPES[key]}",
                            json=found, timeout=10)
        resp.raise_for_status()


def status(port: int) -> str:
    return _api(port, "/check-status")["status"]


def trials(port: int) -> list[TrialRecord]:
    out = []
    for job in _api(port, "/trial-jobs"):
        hyper = json.loads(job["hyperParameters"][-1]) if job.get("hyperParameters") else {}
        metric = None
        for m in job.get("finalMetricData") or []:
            metric = decode_metric(m["data"])
        out.append(TrialRecord(job["trialJobId"], job["status"], hyper.get("parameter_id"),
                               hyper.get("parameters"), metric if isinstance(metric, dict) else None,
                               job.get("sequenceId", 0)))
    return sorted(out, key=lambda r: r.sequence)


def best(records: list[TrialRecord]) -> TrialRecord | None:
    ok = [r for r in records if r.metric and r.metric.get("status") == Status.OK]
    return max(ok, key=lambda r: r.metric["gflops"], default=None)


FATAL_LOGGERS = ("tuners.failure", "nni.runtime.msg_dispatcher_base", "nni.main")
"""Who logs an error only when the dispatcher stops: the suite's tuners (tuners/failure.py), NNI's command
worker (a tuner method raised) and NNI's dispatcher entry point (the tuner could not be built)."""
_ERROR_LINE = re.compile(r"^\[[^\]]*\] ERROR \((?P<logger>[\w.]+)/(?:[^()]|\([^()]*\))*\) (?P<message>.*)$",
                         re.MULTILINE)
_DISPATCHER_STARTED = re.compile(r"^\[[^\]]*\] INFO \(nni\.runtime\.msg_dispatcher_base/[^)]*\) Dispatcher started$",
                                 re.MULTILINE)
MANAGER_GONE = "Connection to NNI manager is broken"
"""What a dispatcher logs when its NNI manager is gone (killed, then `nnictl resume`d): not a tuner's failure."""


def tuner_failure(port: int) -> str | None:
    """Why the tuner stopped, from the dispatcher's log: its first logged error, or None if it logged none.

    NNI's dispatcher logs a tuner's exception there at level ERROR and stops taking commands (see
    tuners/failure.py); the suite's tuners log their own message first.
    """
    try:
        resp = requests.get(f"http://127.0.0.1:{port}/logs/dispatcher.log", timeout=10)
    except requests.RequestException:
        return None
    return fatal_error(resp.text) if resp.ok else None


def fatal_error(log: str) -> str | None:
    """The first error a tuner's stop left in dispatcher.log's text `log`, or None.

    A resumed experiment appends to the log of the run before it: only what its own dispatcher logged counts
    (after the last "Dispatcher started"), and a dispatcher's report that its manager went away (MANAGER_GONE)
    is no tuner's failure.
    """
    starts = list(_DISPATCHER_STARTED.finditer(log))
    own = log[starts[-1].end():] if starts else log
    found = (m["message"].strip() for m in _ERROR_LINE.finditer(own)
             if m["logger"] in FATAL_LOGGERS and not m["message"].startswith(MANAGER_GONE))
    return next(found, None)


def failure(port: int) -> str:
    """Why an experiment in ERROR failed: the tuner's message where it left one, and NNI's own errors."""
    errors = _api(port, "/check-status").get("errors") or []
    found = tuner_failure(port)
    return "; ".join([*([found] if found else []), *errors]) or "NNI gave no reason (see the web UI's logs)"


def wait(port: int, timeout_s: float, poll_s: float = 5.0, progress=None, settle_s: float = 15.0,
         stall_s: float = 5.0) -> str:
    """Poll until the experiment finishes (or `timeout_s` passes); returns the last status.

    NO_MORE_TRIAL is final only once no trial has been active for `settle_s`: a tuner that queued
    requests (and so said "no more" for now) answers them when results arrive, which turns the
    status back to RUNNING.  A RUNNING experiment with no trial active for `stall_s` is checked for
    a tuner that died (NNI then says RUNNING for good): `TunerFailed` with the tuner's message.
    """
    deadline = time.monotonic() + timeout_s
    idle_since = stalled_since = None
    while True:
        now, records = status(port), trials(port)
        if progress:
            progress(now, records)
        active = any(r.status in ACTIVE for r in records)
        idle = now == "NO_MORE_TRIAL" and not active
        idle_since = (idle_since or time.monotonic()) if idle else None
        settled = idle_since is not None and time.monotonic() - idle_since >= settle_s
        stalled_since = (stalled_since or time.monotonic()) if now == "RUNNING" and not active else None
        if stalled_since is not None and time.monotonic() - stalled_since >= stall_s:
            found = tuner_failure(port)
            if found:
                raise TunerFailed(found)
        if now in FINISHED or settled or time.monotonic() > deadline:
            return now
        time.sleep(poll_s)

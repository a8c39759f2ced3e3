"""python -m experiments.tune <config.yml>: run an NNI experiment with nnictl and follow it to the end.

It starts the experiment exactly as a user would (`nnictl create --config ...`), prints progress
from the NNI REST API (the same data the web UI shows), and when the experiment is done prints
the best verified configuration.  The experiment (and its web UI) keeps running until
`nnictl stop` unless --stop is given.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from nni.experiment.config import ExperimentConfig

from trial.command import read_trial_command
from trial.inputs import number_type
from trial.measure import this_device
from trial.records import Record, Records, as_template_takes, decode_metric, default_path
from trial.results import Status
from trial.workload import parse

FINISHED = ("DONE", "ERROR", "STOPPED")
ACTIVE = ("WAITING", "RUNNING", "UNKNOWN")


@dataclass
class TrialRecord:
    trial_id: str
    status: str  # NNI's job status: SUCCEEDED, FAILED, RUNNING, ...
    parameter_id: int | None  # the id NNI sent with the parameters this trial received
    parameters: dict[str, Any] | None
    metric: dict[str, Any] | None  # what the trial reported (our report dict)


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
                               hyper.get("parameters"), metric if isinstance(metric, dict) else None))
    return out


def best(records: list[TrialRecord]) -> TrialRecord | None:
    ok = [r for r in records if r.metric and r.metric.get("status") == Status.OK]
    return max(ok, key=lambda r: r.metric["gflops"], default=None)


def wait(port: int, timeout_s: float, poll_s: float = 5.0, progress=None, settle_s: float = 15.0) -> str:
    """Poll until the experiment finishes (or `timeout_s` passes); returns the last status.

    NO_MORE_TRIAL is final only once no trial has been active for `settle_s`: a tuner that queued
    requests (and so said "no more" for now) answers them when results arrive, which turns the
    status back to RUNNING.
    """
    deadline = time.monotonic() + timeout_s
    idle_since = None
    while True:
        now, records = status(port), trials(port)
        if progress:
            progress(now, records)
        idle = now == "NO_MORE_TRIAL" and not any(r.status in ACTIVE for r in records)
        idle_since = (idle_since or time.monotonic()) if idle else None
        settled = idle_since is not None and time.monotonic() - idle_since >= settle_s
        if now in FINISHED or settled or time.monotonic() > deadline:
            return now
        time.sleep(poll_s)


def _print_progress(state: str, records: list[TrialRecord]) -> None:
    done = [r for r in records if r.metric]
    top = best(records)
    figure = f"best {top.metric['gflops']:.1f} GFLOPS" if top else "no verified kernel yet"
    counts: dict[str, int] = {}
    for r in done:
        counts[r.metric["status"]] = counts.get(r.metric["status"], 0) + 1
    print(f"[{time.strftime('%H:%M:%S')}] {state}: {len(done)} trials measured {counts}, {figure}", flush=True)


def tuned_before(config: Path) -> Record | None:
    """The best recorded verified kernel of the config's workload on this machine's device whose knobs
    fit the template (as it takes them now: `as_template_takes`), if any."""
    found = read_trial_command(ExperimentConfig.load(config).trial_command)
    if not found or not default_path().exists():
        return None
    wl = parse(*found[:2])
    best_found = Records().best(wl.key, this_device(os.environ.get("OPEVO_TARGET", "auto")),
                                fits=as_template_takes(wl))
    return best_found[0] if best_found else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.tune", description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path, help="an experiment config, e.g. experiments/mm/N512K1024M1024/config_opevo.yml")
    p.add_argument("--port", type=number_type(int, 1, 65535), default=8080, help="web UI port (default 8080)")
    p.add_argument("--timeout", type=number_type(float, 1, 30 * 24 * 3600), default=24 * 3600,
                   help="stop following after this many seconds")
    p.add_argument("--stop", action="store_true", help="stop the experiment when it is done")
    p.add_argument("--retune", action="store_true", help="tune even if the records hold a tuned kernel")
    args = p.parse_args(argv)
    if not args.config.is_file():
        p.error(f"no experiment config at {args.config} (write one with python -m experiments.write OP SPEC)")
    known = None if args.retune else tuned_before(args.config)
    if known:
        print(f"a tuned kernel of {known.workload} on {known.device} is recorded: {known.gflops:.1f} GFLOPS, "
              f"{known.latency_ms:.4f} ms ({known.tuner or 'no'} tuner, experiment {known.experiment or '-'}, "
              f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(known.time))}).\n"
              f"export it:  python -m trial.records export {known.workload}\n"
              f"tune again: make tune RETUNE=1  (or python -m experiments.tune {args.config} --retune)")
        return 0
    exp_id = create(args.config, args.port)
    print(f"experiment {exp_id} started: web UI at http://127.0.0.1:{args.port}", flush=True)
    final = wait(args.port, args.timeout, progress=_print_progress)
    top = best(trials(args.port))
    if top:
        m = top.metric
        print(f"best: {m['gflops']:.1f} GFLOPS, {m['latency_ms']:.4f} ms on {m['device']} ({m['target']})\n"
              f"params: {json.dumps(m['params'])}")
    if args.stop:
        nnictl("stop", exp_id)
    else:
        print(f"the web UI stays up; stop it with: nnictl stop {exp_id}")
    return 0 if final in ("DONE", "NO_MORE_TRIAL") else 1


if __name__ == "__main__":
    sys.exit(main())

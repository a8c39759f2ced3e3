"""python -m experiments.tune <config.yml>: check an experiment, run it with nnictl, follow it, sum it up.

It checks the config and its search space in this process first (`preflight`: the tuner built as NNI
builds it takes the space), starts the experiment exactly as a user would (`nnictl create --config
...`), shows a live progress line from the NNI REST API (the data the web UI shows: `progress`), and
at the end prints what the experiment found (`summary`): the best kernel re-timed beside the
hand-picked config and the vendor library, a convergence plot, and the commands to export the kernel
and stop the experiment.  A tuner that fails ends the command at once with its message and exit
status 1.  The experiment (and its web UI) keeps running until stopped, unless --stop is given.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from trial.command import read_trial_command, trial_runner
from trial.inputs import number_type
from trial.measure import this_device
from trial.records import Record, Records, default_path
from trial.target import TargetError
from trial.workload import parse

from . import commands, preflight
from .manager import (  # noqa: F401  (re-exported: the benchmarks and tests drive experiments through `tune`)
    ACTIVE, FINISHED, TrialRecord, TunerFailed, _api, best, create, failure, nnictl, status, trials, wait)
from .progress import Progress
from .summary import summary


def tuned_before(trial_command: str) -> Record | None:
    """The best recorded verified kernel of the trial command's workload on the device its trials measure
    on (this machine's, or the one behind its `--runner`) whose knobs fit the template (as it takes them
    now: `Records.best_kernel`), if any; None also where that device cannot be reached now (the trials
    then report why)."""
    found = read_trial_command(trial_command)
    if not found or not default_path().exists():
        return None
    wl = parse(*found[:2])
    try:
        where = this_device(os.environ.get("OPEVO_TARGET", "auto"), trial_runner(trial_command))
    except TargetError:
        return None
    return Records().best_kernel(wl, where)


def _known(known: Record, config: Path) -> str:
    return (f"a tuned kernel of {known.workload} on {known.device} is recorded: {known.gflops:.1f} GFLOPS, "
            f"{known.latency_ms:.4f} ms ({known.tuner or 'no'} tuner, experiment {known.experiment or '-'}, "
            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(known.time))}).\n"
            f"export it:  {commands.export(known.workload)}\n"
            f"tune again: make tune RETUNE=1  (or python -m experiments.tune {config} --retune)")


def follow(port: int, budget: int | None, timeout_s: float, poll_s: float = 2.0) -> tuple[str, str | None]:
    """Follow the experiment on `port` to its end with a progress line; its last status, and why it
    failed (the tuner's message or NNI's errors) where it did."""
    progress = Progress(budget)
    try:
        final = wait(port, timeout_s, poll_s=poll_s, progress=progress)
    except TunerFailed as err:
        return "RUNNING", str(err)
    finally:
        progress.close()
    return final, failure(port) if final == "ERROR" else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.tune", description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path,
                   help="an experiment config, e.g. experiments/mm/N512K1024M1024/config_opevo.yml")
    p.add_argument("--port", type=number_type(int, 1, 65535), default=8080, help="web UI port (default 8080)")
    p.add_argument("--timeout", type=number_type(float, 1, 30 * 24 * 3600), default=24 * 3600,
                   help="stop following after this many seconds")
    p.add_argument("--stop", action="store_true", help="stop the experiment when it is done")
    p.add_argument("--retune", action="store_true", help="tune even if the records hold a tuned kernel")
    args = p.parse_args(argv)
    try:
        config = preflight.check(args.config)
    except preflight.ConfigError as err:
        p.error(str(err))
    known = None if args.retune else tuned_before(config.trial_command)
    if known:
        print(_known(known, args.config))
        return 0
    exp_id = create(args.config, args.port)
    print(f"experiment {exp_id} started; web UI: http://127.0.0.1:{args.port}", flush=True)
    final, failed = follow(args.port, config.max_trial_number, args.timeout)
    if failed:
        print(f"experiment {exp_id} failed: {failed}", file=sys.stderr)
    else:
        if final not in ("DONE", "NO_MORE_TRIAL"):
            print(f"experiment {exp_id} is {final} after --timeout {args.timeout:g} s; what it found so far:")
        folder = Path(_api(args.port, "/experiment").get("logDir") or args.config.parent)
        tuner = args.config.stem.removeprefix("config_")
        print(summary(trials(args.port), config.trial_command, exp_id, folder, tuner, args.port,
                      stop_hint=not args.stop), flush=True)
    if args.stop:
        nnictl("stop", exp_id)
    elif failed:
        print(f"stop it: {commands.stop(exp_id)}", file=sys.stderr)
    return 0 if final in ("DONE", "NO_MORE_TRIAL") and not failed else 1


if __name__ == "__main__":
    sys.exit(main())

"""Compare tuners on one workload: every trial in a CSV, a convergence plot and a summary table.

    python -m benchmarks.compare mm/N512K1024M1024 --tuners opevo:5 gbfs na2c random tpe metaschedule \\
        --trials 128 --seeds 1 --target auto --workers 4 --out results/mm [--breakdown] [--nnictl]

The suite's tuners and NNI's built-ins run through `benchmarks.driver` (NNI's Tuner API and the
trial's measure path, without NNI's manager), MetaSchedule through `benchmarks.metaschedule`.  Runs go
one after another, so that none shares the machine, or --parallel P at a time (their timing still
never overlaps, by the device lock, but they share the CPUs, so wall times grow).  Each is seeded:
seeds 0..S-1, where S is --seeds, or N for a tuner given as `name:N`.  OUT gets trials.csv (one row
per trial, written as runs finish), runs.json, convergence.png and summary.md, and the table is
printed.  Where PyTorch and a CUDA device are present, the vendor library (cuBLAS/cuDNN FP32, TF32
off) is timed in the same run for the plot and the ratios (not with --runner rpc://..., whose device is
elsewhere).  --breakdown prints where the time of a
trial goes; --nnictl also runs each driver tuner once through `nnictl create` with the same budget,
for NNI's own overhead.
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from experiments import registry
from trial.inputs import number_type
from trial.measure import Options
from trial.remote import LOCAL, add_runner_argument
from trial.results import STAGES
from trial.records import Records, RecordsError
from trial.target import KINDS
from trial.workload import SpecError, Workload, parse_name

from . import driver, metaschedule
from experiments.plots import convergence
from .summary import best, breakdown, summarize, table
from trial.vendor import baseline as vendor_baseline

_logger = logging.getLogger(__name__)

TUNERS = (*driver.TUNERS, "metaschedule")
COLUMNS = ["tuner", "seed", "kind", "index", "parameter_id", "status", "gflops", "latency_ms", "build_s",
           "trial_s", "wall_s", *[f"stage_{stage}_s" for stage in STAGES], "device", "reason", "params"]
"""trials.csv: `kind` is "trial" for a tuner's measurement and "final" for MetaSchedule's best schedule
re-timed through the suite's run path; `build_s` is the compilation alone; `wall_s` is seconds from the
start of the run to the result; `trial_s` the measurement's own duration and the `stage_<stage>_s` its
parts (trial.results.STAGES; for MetaSchedule its batch's build, lock wait and run shared out over the
batch)."""


def plan(items: list[str], seeds: int) -> list[tuple[str, int]]:
    """(tuner, seed) for every run: `name` runs with seeds 0..seeds-1, `name:N` with 0..N-1; a name may
    carry classArgs of its own, `opevo[mutate_rate=0.3]:5` (see `driver.variant`)."""
    out = []
    for item in items:
        name, count = item, None
        if re.search(r":[^\]]*$", item):  # a colon after any classArgs
            name, _, count = item.rpartition(":")
        if metaschedule.is_label(name):  # its arguments checked now, not when its run starts
            metaschedule.strategy(name)
        else:
            driver.make_tuner(name, 0)
        if count is not None and (not count.isdigit() or int(count) < 1):
            raise ValueError(f"bad seed count in {item!r}: expected name:N with N >= 1")
        out += [(name, seed) for seed in range(int(count) if count else seeds)]
    return out


def rows(run: driver.Run) -> list[dict[str, Any]]:
    """The CSV rows of one run: its trials, then MetaSchedule's re-timed best."""
    out = []
    entries = [("trial", t.index, t.parameter_id, t.result, t.seconds, t.finished_s) for t in run.trials]
    if run.final is not None:
        entries.append(("final", None, None, run.final, None, run.wall_s))
    for kind, index, parameter_id, result, seconds, wall in entries:
        stages = result.extra.get("stages", {})
        out.append({"tuner": run.tuner, "seed": run.seed, "kind": kind, "index": index, "parameter_id": parameter_id,
                    "status": result.status, "gflops": result.gflops, "latency_ms": result.latency_ms,
                    "build_s": result.build_s, "trial_s": seconds, "wall_s": wall,
                    **{f"stage_{stage}_s": stages.get(stage) for stage in STAGES}, "device": result.device,
                    "reason": result.reason, "params": json.dumps(result.params) if result.params else ""})
    return out


def nnictl_overhead(wl: Workload, runs: list[driver.Run], trials: int, workers: int, target: str,
                    port: int) -> str:
    """Each driver tuner once through `nnictl create` at the same budget: rates and NNI's overhead per trial.

    An experiment's wall time runs from its `nnictl create` to NNI's own end time of its last trial, so
    how often this process polls the experiment does not count.  Its tuners start cold, as the driver's do.
    """
    from .experiments import nnictl_experiment, write_folder

    os.environ["OPEVO_TARGET"] = target  # the experiment's trials measure on the same target
    folder = write_folder(wl, Path(tempfile.mkdtemp(prefix="opevo-compare-nnictl-")), trials, workers)
    lines = ["| tuner | driver trials/s | nnictl trials/s | driver wall s | nnictl wall s | NNI overhead s/trial |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for tuner in dict.fromkeys(r.tuner for r in runs if not metaschedule.is_label(r.tuner)):
        mine = [r for r in runs if r.tuner == tuner]
        driven, count = float(np.median([r.wall_s for r in mine])), int(np.median([len(r.trials) for r in mine]))
        done = nnictl_experiment(folder, tuner, port, poll_s=2)
        end = done.last_end if done.last_end is not None else done.started + done.wall_s
        wall, measured = end - done.started, len(done.records)
        lines.append(f"| {tuner} | {count / driven:.2f} | {measured / wall:.2f} | {driven:.1f} | {wall:.1f} | "
                     f"{wall / max(1, measured) - driven / max(1, count):.2f} |")
    return "\n".join(lines + ["", "NNI overhead = nnictl wall / trials - driver wall / trials (nnictl wall: from "
                              "`nnictl create` to NNI's end time of the last trial): experiment start-up, the "
                              "manager's polling of trials (every 0.5 s on the local platform), a trial process "
                              "per trial that imports NNI before the measuring process starts."])


def _cuda_target(runs: list[driver.Run]) -> str:
    """The target the trials ran on, a CUDA one where any did ("" where none reported one)."""
    targets = dict.fromkeys(t.result.target for r in runs for t in r.trials if t.result.target)
    return next((t for t in targets if t.startswith("cuda")), next(iter(targets), ""))


def _write_rows(path: Path, run: driver.Run) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(rows(run))


def _run_json(run: driver.Run) -> dict[str, Any]:
    return {"tuner": run.tuner, "seed": run.seed, "experiment": run.experiment, "trials": len(run.trials),
            "best_gflops": best(run), "wall_s": run.wall_s, "tuner_s": run.tuner_s, "setup_s": run.setup_s,
            "ended": run.ended, "final": asdict(run.final) if run.final else None}


def compare(wl: Workload, runs_plan: list[tuple[str, int]], trials: int, out: Path,
            workers: int = registry.CONCURRENCY, options: Options = Options(), records: Records | None = None,
            progress: bool = True, vendor: bool = True, parallel: int = 1, with_breakdown: bool = False,
            nnictl_port: int | None = None
            ) -> tuple[list[driver.Run], list[dict[str, Any]], dict[str, Any] | None, str]:
    """Run the plan, `parallel` runs at a time, and write OUT/trials.csv, runs.json, convergence.png, summary.md.

    Runs at the same time share the CPUs and queue for the device lock: each proposes and measures as it
    would alone, but takes longer.  `with_breakdown` adds where the time of a trial goes to the summary,
    `nnictl_port` each driver tuner once through nnictl (`nnictl_overhead`, web UI on that port).
    Returns the runs that ended (in plan order), the per-tuner summary, the vendor figures (None where
    there are none), the text of summary.md and a line for each run that raised (left out of the rest).
    """
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "trials.csv"
    csv_path.unlink(missing_ok=True)
    writing = threading.Lock()

    failed: list[str] = []

    def one(job: tuple[str, int]) -> driver.Run | None:
        """The run, its rows written; None (logged, and named in the summary) if it raised, so that one
        broken run does not take the others' tables with it."""
        tuner, seed = job
        try:
            if metaschedule.is_label(tuner):
                folder = out / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', tuner).strip('_')}-s{seed}"
                done = metaschedule.run(wl, trials, seed, folder, options, progress, tuner)
            else:
                done = driver.run(wl, tuner, trials, seed, workers, options, records, progress)
        except Exception as err:  # noqa: BLE001 - any error of one run; the traceback goes to the log
            _logger.exception("run %s seed %d failed", tuner, seed)
            with writing:
                failed.append(f"{tuner} seed {seed}: {type(err).__name__}: {err}")
            return None
        with writing:
            _write_rows(csv_path, done)
        return done

    with ThreadPoolExecutor(parallel, thread_name_prefix="run") as pool:
        runs = [run for run in pool.map(one, runs_plan) if run is not None]
    if not runs:
        raise RuntimeError(f"every run failed: {'; '.join(failed)}")
    baseline = (vendor_baseline(wl, _cuda_target(runs), options.repeat, options.min_repeat_ms)
                if vendor else None)
    summary = summarize(runs, baseline)
    device = next((t.result.device for r in runs for t in r.trials if t.result.device), "")
    title = f"{wl.name} on {device}" if device else wl.name
    convergence({s["tuner"]: [r.curve for r in runs if r.tuner == s["tuner"]] for s in summary},
                out / "convergence.png", title,
                (baseline['library'], baseline["gflops"]) if baseline else None,
                {s["tuner"]: [best(r) for r in runs if r.tuner == s["tuner"] and r.final] for s in summary})
    (out / "runs.json").write_text(json.dumps({"workload": wl.key, "trials": trials, "workers": workers,
                                               "parallel": parallel, "failed_runs": failed,
                                               "options": asdict(options), "vendor": baseline, "summary": summary,
                                               "runs": [_run_json(r) for r in runs]}, indent=1, default=str))
    text = (f"# {title}\n\n{trials} trials per run, {workers} workers, {parallel} "
            f"run{'s' if parallel > 1 else ''} at a time.\n\n{table(summary, baseline)}\n")
    if failed:
        text += "\n**Runs that failed** (left out of the table; their tracebacks are in the log):\n\n" + "".join(
            f"- {line[:500]}\n" for line in failed)
    if with_breakdown:
        text += f"\n## Where the time goes\n\n{breakdown(runs)}\n"
    try:
        if nnictl_port is not None:
            overhead = nnictl_overhead(wl, runs, trials, workers, options.target, nnictl_port)
            text += f"\n## Driver and nnictl\n\n{overhead}\n"
    finally:  # the tables so far stay, should the nnictl experiments fail
        (out / "summary.md").write_text(text)
    return runs, summary, baseline, text, failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("workload", help="op/spec, e.g. mm/N512K1024M1024")
    p.add_argument("--tuners", nargs="+", default=["opevo", "gbfs", "na2c", "random", "tpe", "metaschedule"],
                   help=f"of {', '.join(TUNERS)}; name:N runs N seeds of that tuner; name[arg=value,...] "
                        "replaces classArgs of the experiments' (a variant, reported under that label; for "
                        "metaschedule, arguments of its evolutionary search)")
    p.add_argument("--trials", type=number_type(int, 1, 100_000), default=128, help="measured trials per run (default 128)")
    p.add_argument("--seeds", type=number_type(int, 1, 1000), default=1, help="seeds per tuner unless name:N says (default 1)")
    p.add_argument("--workers", type=number_type(int, 1, 1024), default=registry.CONCURRENCY,
                   help=f"trials measured at once by the driver, as trialConcurrency (default {registry.CONCURRENCY})")
    p.add_argument("--parallel", type=number_type(int, 1, 256), default=1,
                   help="runs at a time (default 1: each run alone, for wall times and rates)")
    p.add_argument("--target", choices=KINDS, default=os.environ.get("OPEVO_TARGET", "auto"))
    add_runner_argument(p)
    p.add_argument("--repeat", type=number_type(int, 5, 1000), default=Options.repeat, help="timed repeats per trial (default 5)")
    p.add_argument("--min-repeat-ms", type=number_type(int, 1, 60000), default=Options.min_repeat_ms,
                   help="minimum length of a repeat (default 40, as the trial's)")
    p.add_argument("--out", type=Path, help="output folder (default results/<op>/<spec>/<time>)")
    p.add_argument("--records", help="records store (default: $OPEVO_RECORDS or records/records.sqlite)")
    p.add_argument("--no-record", action="store_true", help="keep the measurements out of the records")
    p.add_argument("--no-vendor", action="store_true", help="skip the cuBLAS/cuDNN baseline")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--breakdown", action="store_true", help="print where the time of a trial goes")
    p.add_argument("--nnictl", action="store_true",
                   help="also run each driver tuner once through nnictl (one seed) for NNI's overhead")
    p.add_argument("--port", type=number_type(int, 1, 65535), default=8080, help="web UI port of the --nnictl experiments")
    args = p.parse_args(argv)
    try:
        wl = parse_name(args.workload)
        runs_plan = plan(args.tuners, args.seeds)
    except (SpecError, ValueError) as err:
        p.error(str(err))
    if args.runner != LOCAL and (any(metaschedule.is_label(t) for t, _ in runs_plan) or args.nnictl):
        p.error("--runner rpc://... measures the suite's and NNI's tuners through the driver; MetaSchedule and "
                "--nnictl run on this machine's device (leave them out, or use the local runner)")
    logging.getLogger("nni").setLevel(logging.WARNING)
    out = args.out or Path("results") / wl.op / wl.spec / time.strftime("%Y%m%d-%H%M%S")
    try:
        records = None if args.no_record else Records(args.records)
    except RecordsError as err:
        p.error(str(err))
    options = Options(target=args.target, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, runner=args.runner)
    # the vendor library runs here, so it is no baseline for a remote device
    vendor = not args.no_vendor and args.runner == LOCAL
    *_, text, failed = compare(wl, runs_plan, args.trials, out, args.workers, options, records, not args.no_progress,
                       vendor, args.parallel, args.breakdown, args.port if args.nnictl else None)
    print(text)
    print(f"wrote {out / 'trials.csv'}, {out / 'convergence.png'}, {out / 'summary.md'}, {out / 'runs.json'}",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

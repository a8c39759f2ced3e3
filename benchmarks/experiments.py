"""Run generated experiments through `nnictl create` and summarise them against the vendor library.

    python -m benchmarks.experiments mm/N512K1024M1024 --tuners opevo gbfs na2c --trials 128 [--together]

The experiment folder is written once to a scratch folder with the given trial budget and no warm
start (each tuner starts cold, so runs are independent of earlier records), and each tuner's
experiment is run to the end exactly as a user runs it, then stopped.  Per tuner it prints the best
GFLOPS, the trials it took to reach 95 % of that, the wall time per trial, and (on CUDA, with
PyTorch) cuBLAS/cuDNN FP32 with TF32 off measured in the same run.  --together runs the tuners'
experiments at the same time (the trials' device lock still serialises timing), which saves machine
time but shares the CPU among them.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from experiments import registry, tune, write
from trial.measure import Options
from trial.remote import LOCAL
from trial.results import Status
from trial.workload import Workload, parse_name

from experiments.plots import best_so_far, trials_to
from trial.vendor import baseline


@dataclass
class Experiment:
    """One finished `nnictl create` experiment, stopped."""

    tuner: str
    id: str
    final: str  # NNI's last status
    records: list[tune.TrialRecord]
    started: float  # time.time() at `nnictl create`
    wall_s: float  # from `nnictl create` to the end of the wait
    last_end: float | None  # NNI's end time (time.time() scale) of the last trial to end, if one ended
    jobs: list[dict]  # NNI's trial jobs as its REST API gives them (times in ms)


def write_folder(wl: Workload, root: Path, trials: int, concurrency: int, runner: str = LOCAL) -> Path:
    """The experiment folder of `wl` under `root` for benchmarks: every tuner's config, no warm start.

    Written once and shared by the tuners' experiments; starting cold keeps a benchmark's runs
    independent of earlier records (and of each other).  `runner`: where the trials measure.
    """
    return write.write(wl, root, max_trials=trials, concurrency=concurrency, warm_start=False, runner=runner)


def nnictl_experiment(folder: Path, tuner: str, port: int, timeout_s: float = 24 * 3600, poll_s: float = 5.0,
                      progress: Callable[[str, list[tune.TrialRecord]], None] | None = None) -> Experiment:
    """Run `tuner`'s experiment of `folder` (see `write_folder`) through nnictl to its end, then stop it.

    The experiment is stopped whatever happens once it is created.
    """
    started, start = time.time(), time.monotonic()
    exp_id = tune.create(folder / f"config_{tuner}.yml", port)
    try:
        final = tune.wait(port, timeout_s=timeout_s, poll_s=poll_s, progress=progress)
        wall = time.monotonic() - start
        records = tune.trials(port)
        jobs = tune._api(port, "/trial-jobs")
    finally:
        tune.nnictl("stop", exp_id, check=False)
    ends = [job["endTime"] / 1000 for job in jobs if job.get("endTime")]
    return Experiment(tuner, exp_id, final, records, started, wall, max(ends) if ends else None, jobs)


def run_one(folder: Path, tuner: str, port: int, timeout_s: float) -> dict:
    start = time.monotonic()

    def progress(state: str, records: list) -> None:
        top = tune.best(records)
        print(f"[{time.monotonic() - start:6.0f} s] {tuner}: {state}, {sum(1 for r in records if r.metric)} measured,"
              f" best {top.metric['gflops'] if top else 0:.1f} GFLOPS", flush=True)

    done = nnictl_experiment(folder, tuner, port, timeout_s=timeout_s, poll_s=10, progress=progress)
    records = done.records
    order = sorted(records, key=lambda r: int(r.parameter_id if r.parameter_id is not None else 1 << 30))
    curve = best_so_far([r.metric["gflops"] if r.metric and r.metric.get("status") == Status.OK else 0.0
                         for r in order])
    statuses: dict[str, int] = {}
    for r in records:
        s = r.metric["status"] if r.metric else f"nni:{r.status}"
        statuses[s] = statuses.get(s, 0) + 1
    top = tune.best(records)
    return {"tuner": tuner, "experiment": done.id, "final_status": done.final, "trials": len(records),
            "best_gflops": curve[-1] if curve else 0.0, "trials_to_95": trials_to(0.95, curve),
            "wall_s": done.wall_s, "wall_per_trial_s": done.wall_s / max(1, len(records)),
            "statuses": statuses, "curve": curve, "best_params": top.metric["params"] if top else None,
            "target": top.metric.get("target", "") if top else ""}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", help="op/spec, e.g. mm/N512K1024M1024")
    p.add_argument("--tuners", nargs="+", default=["opevo"], choices=sorted([*registry.TUNERS, *registry.BUILTIN_TUNERS]))
    p.add_argument("--trials", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=registry.CONCURRENCY)
    p.add_argument("--together", action="store_true", help="run the tuners' experiments at the same time")
    p.add_argument("--port", type=int, default=8080, help="first web UI port; one port per tuner")
    p.add_argument("--timeout", type=float, default=24 * 3600, help="stop each experiment after this many seconds")
    p.add_argument("--json", help="write the summary (with each tuner's best-so-far curve) here")
    args = p.parse_args()
    wl = parse_name(args.workload)
    folder = write_folder(wl, Path(tempfile.mkdtemp(prefix="opevo-bench-")), args.trials, args.concurrency)
    jobs = [(t, args.port + i) for i, t in enumerate(args.tuners)]
    with ThreadPoolExecutor(len(jobs) if args.together else 1) as pool:
        rows = list(pool.map(lambda j: run_one(folder, j[0], j[1], args.timeout), jobs))
    # the trials time with their own defaults (python -m trial: Options' repeat settings)
    vendor = next((baseline(wl, r["target"], Options.repeat, Options.min_repeat_ms) for r in rows
                   if r["best_params"]), None)
    print(f"{args.workload}: {args.trials} trials per tuner, concurrency {args.concurrency}"
          f"{', experiments run together' if args.together else ''}")
    print(f"{'tuner':8} {'best GFLOPS':>12} {'to 95%':>7} {'s/trial':>8} {'vs vendor':>10}  statuses")
    for r in rows:
        ratio = f"{r['best_gflops'] / vendor['gflops']:.2f}" if vendor else "-"
        print(f"{r['tuner']:8} {r['best_gflops']:12.1f} {r['trials_to_95'] or '-':>7} "
              f"{r['wall_per_trial_s']:8.2f} {ratio:>10}  {r['statuses']}")
    if vendor:
        print(f"{vendor['library']}: {vendor['gflops']:.1f} GFLOPS, {vendor['latency_ms']:.4f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": args.workload, "rows": rows, "vendor": vendor}, indent=1))


if __name__ == "__main__":
    main()

"""Replay a measured landscape: tuners against a model of one workload's GFLOPS on one GPU, on the CPU.

    python -m benchmarks.replay mm/N512K1024M1024PNT_tf32 --arch sm_90 \\
        --measured benchmarks/data/mm-N512K1024M1024PNT_tf32-H200.csv.gz --tuners opevo:20 random:20 --trials 128

A search strategy's settings need many seeds to compare, and every GPU trial costs device time. Here
XGBoost (MetaSchedule's cost model) is fitted to the `ok` trials of `benchmarks.compare` runs on one
workload and device (their trials.csv; `benchmarks/data/` keeps the 256 of an OpEvo run in TF32 on an
H200), on each configuration's knob encoding (`SearchSpace.encode`) and its template's resource estimate
(threads, shared bytes, registers per thread). Its prediction stands in for the measurement of each
configuration that keeps `--arch`'s rules, and the tuners run through the benchmark driver as they would
on that GPU (the suite's on the constrained space, NNI's on the twin, read by the trial's
`check.decode`). Each evaluation takes `--latency-ms` (times a uniform draw in [0.5, 1.5]), so that
results come back one at a time and in a varying order, as a GPU's do, and the tuners propose between
them: an instant model hands the tuners all the results of a batch at once, which a GPU never does. The
model's cross-validated rank correlation with the measurements is printed with the tables.

Its figures are a model's, smoother than a GPU and blind beyond the measured region, and it knows no
failure but the rules' (a configuration that failed on the GPU is just not learnt from): use them to
choose which variants to measure on a GPU, never as results.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import random
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import xgboost
from scipy.stats import spearmanr

from searchspace import Config, SearchSpace, SpaceError
from trial import check, templates
from trial.archs import ARCHS, target_of
from trial.inputs import number_type
from trial.measure import Options
from trial.results import MeasureResult, Status
from trial.target import Target
from trial.workload import SpecError, Workload, parse_name

from . import driver, metaschedule
from .compare import plan
from .summary import summarize

MODEL = {"n_estimators": 400, "max_depth": 6, "learning_rate": 0.05, "subsample": 0.8}
RESOURCES = ("threads", "shared_bytes", "registers_per_thread")
CHECKPOINTS = (8, 16, 32, 64, 96, 128)


def read_measured(paths: list[Path], space: SearchSpace) -> dict[str, float]:
    """Median GFLOPS of each configuration of `space` measured `ok` in these trials.csv files (.gz too).

    Rows whose params are not a configuration of `space` (MetaSchedule's traces) are skipped; ValueError
    when the rows name several devices (a landscape is one device's) or none is left."""
    gflops: dict[str, list[float]] = defaultdict(list)
    devices = set()
    for path in paths:
        with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
            for row in csv.DictReader(f):
                try:
                    config = json.loads(row["params"])
                    space.validate(config)
                except (ValueError, SpaceError):
                    continue
                if row["status"] == Status.OK:
                    gflops[json.dumps(config, sort_keys=True)].append(float(row["gflops"]))
                    devices.add(row["device"])
    if len(devices) > 1:
        raise ValueError(f"the measurements come from several devices ({', '.join(sorted(devices))}): give one's")
    if not gflops:
        raise ValueError(f"no ok measurement of this workload's knobs in {', '.join(map(str, paths))}")
    return {key: statistics.median(values) for key, values in gflops.items()}


def measured_template(wl: Workload, target: Target, paths: list[Path]) -> tuple[Any, dict[str, float]]:
    """Of the templates that serve `wl` on `target` (a device-specific one, then the portable one), the first whose
    knobs the trials in `paths` were measured with, and those measurements (`read_measured`): a landscape
    measured before a device-specific template came keeps the portable template's knobs."""
    serving = [t for t in templates.candidates(wl)[:-1] if t.applies(wl, target)] + templates.candidates(wl)[-1:]
    for template in serving[:-1]:
        try:
            return template, read_measured(paths, SearchSpace.from_json(template.search_space(wl)))
        except ValueError:
            continue
    return serving[-1], read_measured(paths, SearchSpace.from_json(serving[-1].search_space(wl)))


class Landscape:
    """GFLOPS of `wl` on `target` as a model fitted to `measured`, configurations of `template`; called as the
    driver's `evaluate`, which takes `latency_s` on average."""

    def __init__(self, wl: Workload, target: Target, measured: dict[str, float], template: Any, seed: int = 0,
                 latency_s: float = 0.0) -> None:
        self.wl, self.target = wl, target
        self.template = template
        self.space = SearchSpace.from_json(self.template.search_space(wl))
        self.features = np.array([self._features(json.loads(key)) for key in measured])
        self.gflops = np.array(list(measured.values()))
        self.seed = seed
        self.model = self._fit(self.features, self.gflops)
        self.latency_s = latency_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()  # the driver evaluates from worker threads

    def _features(self, config: Config) -> list[float]:
        used = self.template.resources(self.wl, config)
        return [*self.space.encode(config), *(math.log2(1 + used[k]) for k in RESOURCES if k in used)]

    def _fit(self, features: np.ndarray, gflops: np.ndarray) -> xgboost.XGBRegressor:
        model = xgboost.XGBRegressor(**MODEL, random_state=self.seed)
        model.fit(features, gflops)
        return model

    def rank_correlation(self, folds: int = 5) -> float:
        """Spearman's rho between held-out predictions and measurements, over `folds` folds."""
        order = np.random.default_rng(self.seed).permutation(len(self.gflops))
        predicted = np.zeros(len(self.gflops))
        for held in np.array_split(order, folds):
            kept = np.setdiff1d(order, held)
            predicted[held] = self._fit(self.features[kept], self.gflops[kept]).predict(self.features[held])
        return float(spearmanr(predicted, self.gflops).statistic)

    def __call__(self, params: dict[str, Any]) -> MeasureResult:
        config = check.decode(self.wl, self.template, params, self.target)
        try:
            check.check(self.wl, self.template, config, self.target)
        except check.InvalidConfig as err:
            return MeasureResult(Status.INVALID, str(err), config)
        with self._lock:
            gflops = float(self.model.predict(np.array([self._features(config)]))[0])
            seconds = self.latency_s * self._rng.uniform(0.5, 1.5)
        time.sleep(seconds)
        return MeasureResult(Status.OK, "", config, gflops=max(gflops, 0.0), target=self.target.label,
                             device=f"model of {self.target.device_name}")


def report(runs: list[driver.Run]) -> str:
    """Markdown: per tuner, its best (median and quartiles over its runs), trials to 95 % of a run's own
    best (median), and the median best after each of CHECKPOINTS trials."""
    shown = [n for n in CHECKPOINTS if any(len(r.curve) >= n for r in runs)]
    head = ["tuner", "runs", "best (median)", "IQR", "trials to 95 %", *(f"best by {n}" for n in shown)]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for s in summarize(runs, None):
        curves = [r.curve for r in runs if r.tuner == s["tuner"] and r.curve]
        cells = [statistics.median(c[min(n, len(c)) - 1] for c in curves) for n in shown]
        to95 = "-" if s["trials_to_95"] is None else f"{s['trials_to_95']:g}"
        row = [s["tuner"], str(s["runs"]), f"{s['best_gflops']:,.0f}", f"{s['best_p25']:,.0f}–{s['best_p75']:,.0f}",
               to95, *(f"{x:,.0f}" for x in cells)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def replay(wl: Workload, landscape: Landscape, runs_plan: list[tuple[str, int]], trials: int,
           workers: int) -> list[driver.Run]:
    """Every (tuner, seed) run of `runs_plan` against `landscape`, one after another."""
    return [driver.run(wl, tuner, trials, seed, workers, Options(), progress=False, evaluate=landscape,
                       target=landscape.target) for tuner, seed in runs_plan]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", help="op/spec, e.g. mm/N512K1024M1024")
    p.add_argument("--measured", type=Path, nargs="+", required=True,
                   help="trials.csv files of benchmarks.compare runs of this workload on one device (.csv.gz too)")
    p.add_argument("--arch", choices=[a for a in ARCHS if a != "llvm"], default="sm_90",
                   help="the architecture whose rules the tuners keep: the measured GPU's (default sm_90)")
    p.add_argument("--tuners", nargs="+", default=["opevo:10", "gbfs:10", "na2c:10", "random:10"],
                   help="as benchmarks.compare's (not metaschedule): name, name:N, name[arg=value]:N")
    p.add_argument("--trials", type=number_type(int, 1, 100_000), default=128, help="trials per run (default 128)")
    p.add_argument("--workers", type=number_type(int, 1, 1024), default=8,
                   help="trials in flight, as benchmarks.compare's (default 8)")
    p.add_argument("--latency-ms", type=number_type(float, 0, 10_000), default=20.0,
                   help="how long an evaluation takes, on average (default 20; 0: results of a batch at once)")
    args = p.parse_args(argv)
    try:
        wl = parse_name(args.workload)
        runs_plan = plan(args.tuners, 1)
    except (SpecError, ValueError) as err:
        p.error(str(err))
    if any(metaschedule.is_label(tuner) for tuner, _ in runs_plan):
        p.error("MetaSchedule searches schedules, not knobs: it has no place on a knob landscape")
    target = target_of(args.arch)
    try:
        template, measured = measured_template(wl, target, args.measured)
    except (OSError, ValueError) as err:
        p.error(str(err))
    landscape = Landscape(wl, target, measured, template, latency_s=args.latency_ms / 1000)
    print(f"# {wl.name}: a model of {len(measured):,} measured configurations ({args.arch} rules), "
          f"cross-validated rank correlation {landscape.rank_correlation():.3f}, best measured "
          f"{max(measured.values()):,.0f} GFLOPS; the GFLOPS below are the model's\n")
    runs = replay(wl, landscape, runs_plan, args.trials, args.workers)
    print(report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

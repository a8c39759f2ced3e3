"""TVM MetaSchedule as a peer of the suite's tuners: same workload, trial budget, target and final timing.

`run` tunes the template's unscheduled TensorIR (`prim_func(wl)`) with `tune_tir` and its defaults
(evolutionary search, XGBoost cost model, the target's default schedule rules; its tensor-core rules for
float16, int8 and float8 on CUDA), given the budget as `max_trials_global`.  A label
`metaschedule[init_min_unmeasured=8,max_fail_count=20]` sets arguments of its evolutionary search
(`STRATEGY_ARGS`): where few of its sampled schedules pass its GPU checks, the defaults give up before
the first round (the study's 11x11 conv; docs/benchmarks.md, "MetaSchedule as a peer").  Its candidates
are built by its own builder and then verified and timed by the measuring service as the suite's
kernels are (`ServiceRunner`: every GPU of the host takes them, each timed from a CUDA graph, a wrong
output a failed candidate), so its cost model learns from the same figures, and each one is reported as
a trial.  Its `finalists` fastest schedules (3, as the protocol re-times a tuner's 3 best configs) are
then compiled into libraries, which the suite verifies and times like any trial's
(`trial.measure.measure_library`): `Run.finalists`, and the fastest of them, `Run.final`, is the figure
to compare.

Everything happens in a child process (benchmarks/metaschedule_child.py), so the caller never imports
TVM or holds a GPU context, and a crash of MetaSchedule becomes a result.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

from trial.measure import Options, measure_library
from trial.results import MeasureResult, Status
from trial.workload import Workload

from .driver import Progress, Run, Trial, variant
from .metaschedule_child import child
from .placement import Share

NAME = "metaschedule"
STRATEGY_ARGS = ("population_size", "init_measured_ratio", "init_min_unmeasured", "max_fail_count",
                 "genetic_num_iters", "genetic_mutate_prob", "genetic_max_fail_count", "eps_greedy")
"""The arguments of TVM 0.27's EvolutionarySearch, which a label may set."""
FINALISTS = 3
"""The fastest schedules of a run that the suite re-times."""


def is_label(label: str) -> bool:
    """Whether `label` names MetaSchedule (`metaschedule`, or with search arguments)."""
    return label.split("[", 1)[0] == NAME


def strategy(label: str) -> dict[str, Any]:
    """The EvolutionarySearch arguments of a MetaSchedule label ({} for its defaults); ValueError if malformed."""
    _, args = variant(label, (NAME,))
    unknown = sorted(set(args) - set(STRATEGY_ARGS))
    if unknown:
        raise ValueError(f"unknown MetaSchedule search argument(s) {', '.join(unknown)} in {label!r}: "
                         f"expected {', '.join(STRATEGY_ARGS)}")
    return args


def run(wl: Workload, trials: int, seed: int, work_dir: str | os.PathLike[str], options: Options = Options(),
        progress: bool = True, label: str = NAME, finalists: int = FINALISTS, share: Share | None = None) -> Run:
    """One seeded MetaSchedule run of `trials` trials, its search set by `label` (`strategy`); its database,
    logs and best schedules' libraries stay in `work_dir`.  With `share`, it sees only that share's GPUs
    and runs on its cores (benchmarks/placement.py); its best schedules are timed on any GPU."""
    search = strategy(label)
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    place = (share.gpus, share.cpus, share.cores) if share else None
    proc = ctx.Process(target=child, args=(sender, wl.op, wl.spec, trials, seed, options, str(work_dir), search,
                                           finalists, place), daemon=False)
    out = Run(label, seed, workers=1)
    bar = Progress(trials, f"{label} seed {seed}", progress)
    where: dict[str, str] = {}
    start = time.perf_counter()
    tuned_at = None
    proc.start()
    sender.close()
    try:
        while out.final is None:
            try:
                kind, payload = receiver.recv()
            except EOFError:
                proc.join(5)
                out.final = MeasureResult(Status.RUNTIME_ERROR, f"MetaSchedule process exited with code {proc.exitcode} "
                                          f"after {len(out.trials)} trials", **where)
                break
            now = time.perf_counter() - start
            if kind == "target":
                where = payload
            elif kind == "setup":
                out.setup_s = payload
            elif kind == "trial":
                result = MeasureResult(**payload, **where)
                seconds = sum(result.extra["stages"].values())
                out.trials.append(Trial(len(out.trials) + 1, None, result, now, seconds))
                bar.add(result)
            elif kind == "tuned":
                tuned_at = now
            else:  # the best schedules' libraries, each verified and timed as every trial of the suite is
                out.finalists = [_finalist(wl, built, options, where) for built in payload]
                ok = [f for f in out.finalists if f.status == Status.OK]
                out.final = max(ok, key=lambda f: f.gflops) if ok else out.finalists[0]
    finally:
        bar.close()
        receiver.close()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    out.wall_s = time.perf_counter() - start
    measured = sum(t.seconds for t in out.trials)
    out.tuner_s = max(0.0, (tuned_at or out.wall_s) - out.setup_s - measured)
    out.ended = "budget" if len(out.trials) >= trials else "no more trials"
    return out


def _finalist(wl: Workload, built: dict[str, Any], options: Options, where: dict[str, str]) -> MeasureResult:
    """A finalist's library verified and timed by the measuring service, or why there is none."""
    if built["status"] != "built":
        return MeasureResult(built["status"], built["reason"], **where)
    result = measure_library(wl, Path(built["library"]), options)
    result.build_s, result.extra = built["build_s"], {**result.extra, **built["extra"]}
    return result


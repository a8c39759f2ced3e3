"""Tune a model's tasks: spend one budget across them by expected gain on the model's time.

`tune(tasks, out, trials, minutes)` gives each task an experiment folder (experiments/write.py) under
out/experiments/<op>/<spec>/ and one NNI experiment, which runs in rounds (rounds.py: created, then
its trial budget raised round by round).  An experiment stays running between its rounds, on a web-UI
port of its own from `port` upwards, at most live.live_bound() at once (live.py); all are stopped when
`tune` ends, however it ends.  Which task gets the next round is Ansor's gradient task scheduler
(scheduler.py), after a warm-up round of every task; each round done is said in a line (`progress`).
out/manifest.json (manifest.py) is rewritten after every step, so a killed run started again with the
same `out` resumes where it stopped and spends no trial twice.

Before any tuning, a task whose workload has a verified kernel on this device in the records
(knowledge.py) is taken from there and not measured again, unless `retune`: a second `tune` of the
same model, or of another model that shares its shapes, measures nothing already tuned.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from trial.measure import this_device
from trial.workload import SpecError, Workload, parse_name

from .. import write
from ..registry import CONCURRENCY
from . import knowledge
from .live import LivePool, stop_left_over
from .manifest import Entry, Manifest
from .rounds import NniRounds, RoundResult, Started
from .scheduler import Progress, pick

ROUND_TRIALS = 32  # trials of a round at most on a CPU: four generations of OpEvo's 8 offspring
ROUND_WAVES = 4
"""A round holds at least this many waves of trials (trialConcurrency each; OpEvo's offspring_size is the
concurrency, so a wave is a generation): a round ends when its last trial does, and the GPUs idle while
NNI waits for the last wave's stragglers, so a round of one or two waves idles for a large part of it;
four keep that tail to about an eighth.  Only a trial budget too small to pay for it cuts rounds shorter."""
MIN_ROUND_TRIALS = 2  # the warm-up round must measure at least this many configurations a task
WARMUP_TRIALS = 8  # a task's first round under a time budget: one generation of OpEvo's 8 parents
WARMUP_WAVES = 2  # ... and at least two waves of trials, for the GPUs
DAY_S = 24 * 3600.0  # the longest a round of a trial budget may take (experiments.tune's default)


class TaskLike(Protocol):
    """What tune needs of a task (experiments/model/tasks.py defines the model's `Task`)."""

    workload: str
    count: int
    time_ms: float
    share: float


Runner = Callable[[Workload, str | None, int, float, Started], RoundResult]
"""(workload, its experiment or None, trials it holds at the end, seconds left, started) -> result."""


@contextlib.contextmanager
def _target(target: str) -> Iterator[None]:
    """$OPEVO_TARGET set to `target` for the writer, the experiments and their trials, then restored."""
    before = os.environ.get("OPEVO_TARGET")
    os.environ["OPEVO_TARGET"] = target
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OPEVO_TARGET", None)
        else:
            os.environ["OPEVO_TARGET"] = before


def round_trials(trials: int | None, n_tasks: int, concurrency: int = CONCURRENCY) -> int:
    """Trials of a round: `ROUND_TRIALS` or `ROUND_WAVES` waves of `concurrency` trials, whichever is more,
    cut so the warm-up round takes at most half a trial budget; ValueError where the budget cannot pay a
    warm-up round of `MIN_ROUND_TRIALS` a task.

    Ansor cuts its round (num_measures_per_round, 64) to budget // tasks, so any budget under 64 trials
    a task is spent in the warm-up alone, i.e. round-robin; half leaves the rest to the gradient.
    """
    full = max(ROUND_TRIALS, ROUND_WAVES * concurrency)
    if trials is None:
        return full
    if trials < n_tasks * MIN_ROUND_TRIALS:
        need = n_tasks * MIN_ROUND_TRIALS
        raise ValueError(f"a budget of {trials} trials is smaller than the warm-up round: {n_tasks} task"
                         f"{'s' * (n_tasks > 1)} to tune x {MIN_ROUND_TRIALS} trials = {need}; give at least "
                         f"{need} trials (or a time budget)")
    return min(full, max(trials // (2 * n_tasks), MIN_ROUND_TRIALS))


def _entry(task: TaskLike, device: str, retune: bool) -> tuple[Entry, Workload | None]:
    count, time_ms = int(task.count), float(task.time_ms)
    entry = Entry(task.workload, count, time_ms, float(task.share), Progress(count, time_ms / max(count, 1)))
    try:
        wl = parse_name(task.workload)
    except SpecError as err:
        entry.skipped = f"the suite cannot tune it: {err}"
        return entry, None
    if count < 1 or not time_ms >= 0:
        entry.skipped = f"no time in the model to gain (count {count}, {time_ms} ms)"
        return entry, None
    entry.key = wl.key
    known = knowledge.lookup(wl, device)
    entry.note = known.note
    if known.best is not None and not retune:
        best = known.best
        entry.from_records, entry.gflops, entry.latency_ms = True, best.gflops, best.latency_ms
        entry.experiment = best.experiment
        if best.latency_ms is not None:
            entry.progress.cost_ms = min(entry.progress.cost_ms, best.latency_ms)
    return entry, wl


def plan(tasks: list[TaskLike], trials: int | None, minutes: float | None, target: str, device: str,
         retune: bool, concurrency: int = CONCURRENCY) -> Manifest:
    """The manifest of a new run: every task parsed and looked up in the records; rounds sized for
    experiments of trialConcurrency `concurrency`."""
    entries, seen = [], {}
    for task in tasks:
        entry, wl = _entry(task, device, retune)
        if wl is not None and wl.key in seen:
            entry.skipped, entry.from_records = f"the same workload as {seen[wl.key]}: one kernel serves both", False
        elif wl is not None:
            seen[wl.key] = task.workload
        entries.append(entry)
    to_tune = sum(e.tuned for e in entries)
    size = round_trials(trials, to_tune, concurrency) if to_tune else 0
    # Under a time budget the rate is unknown, so the warm-up round is kept short: every task is measured
    # and weighed by the scheduler before any gets a full round (with 24 tasks and rounds of 32, seven
    # minutes on an H200 reached 9 of them).
    warmup = min(size, max(WARMUP_TRIALS, WARMUP_WAVES * concurrency)) if trials is None else size
    return Manifest(target, device, trials, minutes, size, entries, warmup_trials=warmup)


def _check(tasks: list[TaskLike], trials: int | None, minutes: float | None) -> None:
    if not tasks:
        raise ValueError("no tasks to tune: the model has no operator the suite can tune (see its task table)")
    if trials is None and minutes is None:
        raise ValueError("give a budget: trials or minutes")
    if trials is not None and trials < 1:
        raise ValueError(f"trials must be at least 1, not {trials}")
    if minutes is not None and not (minutes > 0 and math.isfinite(minutes)):
        raise ValueError(f"minutes must be a positive number, not {minutes}")


def print_now(line: str) -> None:
    print(line, flush=True)


def model_ms(m: Manifest) -> tuple[float, float]:
    """The tasks' time in the model as profiled, and as estimated with every best kernel so far applied
    where it beats the vendor's (each task's per-call cost times its calls)."""
    before = sum(e.time_ms for e in m.entries)
    return before, sum(e.count * e.progress.cost_ms if e.skipped is None else e.time_ms for e in m.entries)


def progress(m: Manifest, e: Entry, measured: int) -> str:
    """One line on the round just done and the run so far."""
    best = f"best {e.latency_ms:.4f} ms a call" if e.latency_ms is not None else "no verified kernel yet"
    budget = f" of {m.trials}" if m.trials is not None else ""
    before, after = model_ms(m)
    return (f"round {sum(x.progress.rounds for x in m.entries)}, {e.workload}: {measured} trials, {best} "
            f"(the model's own op {e.time_ms / max(e.count, 1):.4f}); {m.spent}{budget} trials in "
            f"{m.elapsed_s:.0f} s; the tasks' time in the model {before:.3f} -> {after:.3f} ms (estimate)")


def run(m: Manifest, out: Path, runner: Runner, trials: int | None, minutes: float | None,
        clock: Callable[[], float] = time.monotonic, say: Callable[[str], None] = print_now) -> Manifest:
    """Spend the budget round by round (warm-up first, then the scheduler's pick), saving after each step
    and saying how each round went."""
    m.trials, m.minutes = trials, minutes
    start, before = clock(), m.elapsed_s
    tuned = [i for i, e in enumerate(m.entries) if e.tuned]

    def left_s() -> float:
        m.elapsed_s = before + clock() - start
        return math.inf if minutes is None else minutes * 60 - m.elapsed_s

    while True:
        if m.in_flight is None:
            i = pick([m.entries[j].progress for j in tuned])
            room = math.inf if trials is None else trials - m.spent
            if i is None or room <= 0 or left_s() <= 0:
                break
            i = tuned[i]
            first = m.entries[i].progress.rounds == 0
            size = (m.warmup_trials or m.round_trials) if first else m.round_trials
            m.in_flight = {"task": i, "upto": m.entries[i].trials + int(min(size, room))}
            m.save(out)
        i, upto = m.in_flight["task"], m.in_flight["upto"]
        e = m.entries[i]

        def started(exp_id: str, e: Entry = e) -> None:
            e.experiment = exp_id
            m.save(out)

        result = runner(parse_name(e.workload), e.experiment, upto, min(max(left_s(), 1.0), DAY_S), started)
        measured = max(result.trials - e.trials, 0)
        e.experiment, e.trials = result.experiment, max(result.trials, e.trials)
        m.spent += measured
        if result.gflops is not None and (e.gflops is None or result.gflops > e.gflops):
            e.gflops, e.latency_ms = result.gflops, result.latency_ms
        e.progress.record(e.latency_ms if e.latency_ms is not None else math.inf, measured)
        m.in_flight = None
        left_s()
        m.save(out)
        say(progress(m, e, measured))
    return m


def summary(m: Manifest) -> dict[str, Any]:
    """The result: per task its workload, trials, best GFLOPS and latency, where it came from."""
    rows = [{"workload": e.workload, "key": e.key, "count": e.count, "share": e.share, "trials": e.trials,
             "gflops": e.gflops, "latency_ms": e.latency_ms, "from_records": e.from_records,
             "experiment": e.experiment, "skipped": e.skipped, "note": e.note} for e in m.entries]
    before, after = model_ms(m)
    return {"target": m.target, "device": m.device, "trials": m.spent, "budget_trials": m.trials,
            "budget_minutes": m.minutes, "elapsed_s": round(m.elapsed_s, 1), "tasks": rows,
            "model_ms_before": before, "model_ms_estimate": after}


def table(s: dict[str, Any]) -> str:
    """A short table of the summary, one line per task."""
    lines = [f"{'workload':<34} {'count':>5} {'share':>6} {'trials':>6} {'GFLOPS':>9} {'ms/call':>9}  source"]
    for r in s["tasks"]:
        source = (f"skipped: {r['skipped']}" if r["skipped"] else "records" if r["from_records"]
                  else f"experiment {r['experiment']}" if r["experiment"] else "not tuned (budget spent)")
        gflops = f"{r['gflops']:.1f}" if r["gflops"] is not None else "-"
        latency = f"{r['latency_ms']:.4f}" if r["latency_ms"] is not None else "-"
        lines.append(f"{r['workload']:<34} {r['count']:>5} {r['share']:>6.1%} {r['trials']:>6} {gflops:>9} "
                     f"{latency:>9}  {source}")
        if r["note"]:
            lines.append(f"  note: {r['note']}")
    lines.append(f"{s['trials']} trials on {s['device']} ({s['target']}) in {s['elapsed_s']:.0f} s; the tasks' "
                 f"time in the model {s['model_ms_before']:.3f} ms -> {s['model_ms_estimate']:.3f} ms (estimate)")
    return "\n".join(lines)


def tune(tasks: list[TaskLike], out: Path, trials: int | None, minutes: float | None, target: str = "auto",
         retune: bool = False, port: int = 8080) -> dict[str, Any]:
    """Tune the model's `tasks` within `trials` in all and/or `minutes` of wall time (whichever ends first)
    on `target` (auto|cuda|rocm|llvm), the tasks' NNI experiments on web-UI ports from `port` up; returns
    `summary` and prints its table.  `out` holds the experiments and the manifest; a manifest already
    there (a killed or finished run of the same tasks) is resumed, with the budget given now."""
    _check(tasks, trials, minutes)
    out = Path(out)
    with _target(target), LivePool(port) as pool:
        device = this_device(target)
        m = Manifest.load(out)
        concurrency = write.auto_concurrency(target)
        nni = NniRounds(out, pool, concurrency)
        if m is None:
            m = plan(tasks, trials, minutes, target, device, retune, concurrency)
            for e in m.entries:
                if e.tuned:
                    nni.prepare(parse_name(e.workload), m.round_trials)
            m.save(out)
        else:
            m.check_same([t.workload for t in tasks], device, out)
            left = [e.experiment for e in m.entries if e.tuned and e.experiment]
            for exp_id in stop_left_over(left, concurrency):
                print(f"stopped experiment {exp_id}, left running by an earlier run of {out}", flush=True)
        run(m, out, nni, trials, minutes)
    result = summary(m)
    print(table(result), flush=True)
    return result

"""Per-tuner figures of a comparison's runs, and their markdown tables (`benchmarks.compare`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from trial.results import STAGES, Status

from . import driver, metaschedule
from experiments.plots import trials_to


def best(run: driver.Run) -> float:
    """The run's result: its best trial, or for MetaSchedule its best schedule as the suite timed it."""
    if run.final is not None:
        return run.final.gflops if run.final.status == Status.OK else 0.0
    return run.curve[-1] if run.curve else 0.0


def _devices(run: driver.Run) -> int:
    return max(1, len({(t.result.device, t.result.device_index) for t in run.trials if t.result.device}))


def summarize(runs: list[driver.Run], vendor: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per tuner, over its runs: best (median and quartiles), trials to 95 %, vendor ratio, wall time, rates."""
    out = []
    for tuner in dict.fromkeys(r.tuner for r in runs):
        mine = [r for r in runs if r.tuner == tuner]
        bests = [best(r) for r in mine]
        to95 = [n for n in (trials_to(0.95, r.curve) for r in mine) if n is not None]
        trials = [t for r in mine for t in r.trials]
        median = float(np.median(bests))
        out.append({
            "tuner": tuner, "runs": len(mine), "trials": int(np.median([len(r.trials) for r in mine])),
            "best_gflops": median, "best_p25": float(np.percentile(bests, 25)),
            "best_p75": float(np.percentile(bests, 75)),
            "search_best_gflops": float(np.median([r.curve[-1] if r.trials else 0.0 for r in mine])),
            "trials_to_95": float(np.median(to95)) if to95 else None,
            "vs_vendor": median / vendor["gflops"] if vendor else None,
            "wall_s": float(np.median([r.wall_s for r in mine])),
            "trials_per_s": float(np.median([len(r.trials) / r.wall_s for r in mine if r.wall_s > 0] or [0.0])),
            "ok_fraction": sum(t.result.status == Status.OK for t in trials) / max(1, len(trials)),
            "ended": sorted({r.ended for r in mine}),
        })
    return out


def table(summary: list[dict[str, Any]], vendor: dict[str, Any] | None) -> str:
    """The markdown table of `summarize`."""
    lines = ["| tuner | runs | trials | best GFLOPS (median) | IQR | trials to 95 % | vs vendor | wall s | trials/s "
             "| ok |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in summary:
        iqr = f"{s['best_p25']:.1f}–{s['best_p75']:.1f}" if s["runs"] > 1 else "-"
        ratio = f"{s['vs_vendor']:.2f}" if s["vs_vendor"] is not None else "-"
        to95 = f"{s['trials_to_95']:g}" if s["trials_to_95"] is not None else "-"
        lines.append(f"| {s['tuner']} | {s['runs']} | {s['trials']} | {s['best_gflops']:.1f} | {iqr} | {to95} | "
                     f"{ratio} | {s['wall_s']:.1f} | {s['trials_per_s']:.2f} | {s['ok_fraction']:.0%} |")
    notes = []
    if vendor:
        notes.append(f"Vendor: {vendor['library']}, {vendor['gflops']:.1f} GFLOPS, "
                     f"{vendor['latency_ms']:.4f} ms.")
    for s in summary:
        if metaschedule.is_label(s["tuner"]):
            notes.append(f"{s['tuner']}: best is its best schedule verified and timed through the suite's run "
                         f"path; its own measurements peaked at {s['search_best_gflops']:.1f} GFLOPS (median). "
                         "Its wall time includes its one-off set-up.")
    return "\n".join(lines + ([""] + notes if notes else []))


def breakdown(runs: list[driver.Run]) -> str:
    """Markdown: per tuner, trials per second (per device) and the mean seconds of each part of a trial."""
    head = ["tuner", "trials/s", "per device", "wall/trial", "trial", *STAGES, "of build: compile",
            "tuner/trial", "one-off", "workers busy"]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for tuner in dict.fromkeys(r.tuner for r in runs):
        mine = [r for r in runs if r.tuner == tuner and r.trials]
        if not mine:
            continue
        trials = [t for r in mine for t in r.trials]
        n, wall = len(trials), sum(r.wall_s for r in mine)
        rate = n / wall
        per_device = n / sum(r.wall_s * _devices(r) for r in mine)

        def mean(values: Any) -> float:
            return sum(v or 0.0 for v in values) / n

        stages = [mean(t.result.extra.get("stages", {}).get(s) for t in trials) for s in STAGES]
        busy = sum(t.seconds for t in trials) / sum(r.wall_s * r.workers for r in mine)
        cells = [tuner, f"{rate:.2f}", f"{per_device:.2f}", f"{wall / n:.2f}", f"{mean(t.seconds for t in trials):.2f}",
                 *[f"{v:.3f}" for v in stages], f"{mean(t.result.build_s for t in trials):.3f}",
                 f"{sum(r.tuner_s for r in mine) / n:.3f}", f"{np.mean([r.setup_s for r in mine]):.1f}", f"{busy:.0%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", "Seconds. trial: one measurement from start to end; its stages (means per "
                              "trial, overlapping across workers, see trial.results.STAGES): startup = reaching the "
                              "measuring service (starting it for the first trial), setup = the target and a free "
                              "build worker, build = knob check, compile and export, lock_wait = waiting for the "
                              "device (its runner, the reference outputs, the device lock), run = verify and time, "
                              "exit = the answer's way back. MetaSchedule: its batches' build, lock wait and run "
                              "shared out over their candidates, its search and cost model under tuner/trial, its "
                              "process start-up under one-off. workers busy = measurement time / (wall x workers)."])

"""What a finished experiment found: the best kernel re-timed beside the hand-picked config and (on a
GPU) the vendor library, the trial that found it, a convergence plot, and the commands to go on.

The figures a tuner saw were measured while other trials built and ran; the summary times the best
kernel, the template's hand-picked config (`default_params`) and the vendor library again, one after the
other, through the same measure path (trial/measure.py), so the three compare like with like. On the CPU
it says how far each figure's repeats spread, since a busy machine moves CPU timings by tens of percent.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trial.command import read_trial_command, trial_runner
from trial.measure import Options, measure
from trial.results import Status
from trial.vendor import baseline
from trial.workload import Workload, parse

from . import commands
from .manager import TrialRecord, best
from .plots import best_so_far, convergence


@dataclass
class Timed:
    """One kernel re-timed: what it is, and its figures (`status` other than ok: no figures)."""

    label: str
    status: str
    gflops: float = 0.0
    latency_ms: float | None = None
    spread: float | None = None  # standard deviation of the repeats over their mean
    reason: str = ""
    warning: str = ""  # a note from the measurement (e.g. the CPU was busy), where it gave one


def _timed(label: str, result: Any) -> Timed:
    report = result.report()
    std, ms = report.get("latency_std_ms"), report.get("latency_ms")
    return Timed(label, str(report["status"]), report["gflops"], ms,
                 std / ms if std is not None and ms else None, report.get("reason", ""), report.get("warning") or "")


def retime(wl: Workload, params: dict[str, Any], options: Options, label: str = "tuned") -> tuple[list[Timed], str]:
    """The tuned kernel (first, as `label`), the hand-picked config and the vendor library (where there is
    one) timed one after the other; also the device they ran on."""
    tuned = measure(wl, params, options)
    rows = [_timed(label, tuned), _timed("hand-picked", measure(wl, None, options))]
    vendor = baseline(wl, tuned.target, options.repeat, options.min_repeat_ms)
    if vendor:
        rows.append(Timed(vendor["library"], Status.OK, vendor["gflops"], vendor["latency_ms"]))
    return rows, f"{tuned.device} ({tuned.target})" if tuned.device else tuned.target


def curve(records: list[TrialRecord]) -> list[float]:
    """Best GFLOPS so far after each trial, in NNI's trial order (a trial without a kernel counts 0)."""
    ordered = sorted(records, key=lambda r: r.sequence)
    return best_so_far([r.metric["gflops"] if r.metric and r.metric.get("status") == Status.OK else 0.0
                        for r in ordered])


def plot(records: list[TrialRecord], rows: list[Timed], path: Path, title: str, tuner: str) -> Path:
    """The convergence plot: best so far against trials, the re-timed best (`rows[0]`) as a star, the
    hand-picked config and the vendor library as horizontal lines."""
    ok = [r for r in rows if r.status == Status.OK]
    finals = {tuner: [rows[0].gflops]} if rows and rows[0] in ok else None
    convergence({tuner: [curve(records)]}, path, title, finals=finals,
                references=[(r.label, r.gflops) for r in ok if r is not rows[0]])
    return path


def table(rows: list[Timed], cpu: bool) -> list[str]:
    """The re-timed rows (the tuned kernel first), then the ratios and, on the CPU, how noisy they are."""
    lines = [f"  {'kernel':<34} {'GFLOPS':>9} {'ms':>10} {'spread':>7}"]
    for r in rows:
        if r.status != Status.OK:
            lines.append(f"  {r.label:<34} {r.status}: {r.reason[:80]}")
            continue
        spread = f"{100 * r.spread:6.1f}%" if r.spread is not None else "      -"
        lines.append(f"  {r.label:<34} {r.gflops:9.1f} {r.latency_ms or 0:10.4f} {spread}")
    if rows and rows[0].status == Status.OK:
        for other in (r for r in rows[1:] if r.status == Status.OK and r.gflops > 0):
            lines.append(f"  tuned / {other.label}: {rows[0].gflops / other.gflops:.2f}x")
    spreads = [r.spread for r in rows if r.spread is not None]
    if cpu and spreads:
        lines.append(f"  CPU timings: the repeats of each figure spread by {100 * min(spreads):.1f}-"
                     f"{100 * max(spreads):.1f}% (standard deviation over mean); other programs on the same "
                     f"cores move CPU figures by more, so read a ratio within a few spreads of 1 as a tie")
    lines += [f"  warning ({r.label}): {r.warning}" for r in rows if r.warning]
    return lines


def summary(records: list[TrialRecord], trial_command: str, exp_id: str, plot_dir: Path, tuner: str,
            port: int | None = None, options: Options | None = None, stop_hint: bool = True) -> str:
    """The summary text of a finished experiment (the plot is written to `plot_dir`); with `stop_hint`,
    how to stop it (its web UI stays up until then)."""
    found = read_trial_command(trial_command)
    top = best(records)
    out = [f"{len(records)} trials, " + ("no verified kernel" if top is None else
           f"best {top.metric['gflops']:.1f} GFLOPS ({top.metric['latency_ms']:.4f} ms) at trial "
           f"{top.sequence + 1} of {len(records)}")]
    rows: list[Timed] = []
    if top is not None:
        out.append(f"  params: {json.dumps(top.metric['params'])}")
        if top.metric.get("warning"):
            out.append(f"  warning (trial {top.sequence + 1}): {top.metric['warning']}")
    if top is not None and found:
        wl = parse(*found[:2])
        options = options or Options(target=os.environ.get("OPEVO_TARGET", "auto"),
                                     runner=trial_runner(trial_command))
        rows, where = retime(wl, top.metric["params"], options, f"tuned (trial {top.sequence + 1})")
        out.append(f"re-timed one after the other on {where}, {options.repeat} repeats each:")
        out += table(rows, cpu=str(top.metric.get("target", "")).startswith("llvm"))
    if records:
        path = plot(records, rows, plot_dir / "convergence.png",
                    f"{found[0]}/{found[1]}, {tuner}, experiment {exp_id}" if found else exp_id, tuner)
        out.append(f"convergence plot: {path}")
    if found:
        out.append(f"export the kernel:  {commands.export(f'{found[0]}/{found[1]}')}")
    if stop_hint:
        out.append(f"stop the experiment and its web UI:  {commands.stop(exp_id)}"
                   + (f"  (or: make stop PORT={port})" if port and Path("Makefile").is_file() else ""))
    return "\n".join(out)

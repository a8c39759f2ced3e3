"""The benchmark protocol's report: a header with the command, device and versions, and a table per set.

Each row is one (workload, tuner) over its seeds' records (`benchmarks.protocol_run`): the median best
GFLOPS and the median ratio to the vendor, each with its 95 % bootstrap interval (`benchmarks.stats`),
and the median trials and seconds a run took to reach 95 % of its own best.
"""
from __future__ import annotations

import math
import shlex
import subprocess
import time
from collections import Counter
from importlib import metadata
from typing import Any

import numpy as np

from .stats import median_ci
from .workloads import Entry


def _version(*distributions: str) -> str | None:
    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cuda() -> str | None:
    """PyTorch's CUDA version where PyTorch imports (None on a CPU build or without PyTorch)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.version.cuda


def _nvidia_driver() -> str | None:
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = answer.stdout.split()
    return lines[0] if answer.returncode == 0 and lines else None


def versions() -> dict[str, str]:
    """The versions a result depends on, those that are present: TVM, NNI, PyTorch, CUDA, the NVIDIA driver."""
    found = {"TVM": _version("apache-tvm", "tvm"), "NNI": _version("nni"), "PyTorch": _version("torch"),
             "CUDA": _cuda(), "NVIDIA driver": _nvidia_driver()}
    return {name: value for name, value in found.items() if value}


def header(argv: list[str], device: str, found: dict[str, str] | None = None, date: str | None = None) -> str:
    """The report's header: the command, the device, the versions and the date (UTC; `date`: said instead)."""
    found = versions() if found is None else found
    stack = ", ".join(f"{name} {value}" for name, value in found.items()) or "no versions found"
    return (f"Command: `{shlex.join(['python', '-m', 'benchmarks.protocol', *argv])}`  \n"
            f"Device: {device or 'unknown'}  \nVersions: {stack}  \n"
            f"Date: {date or time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def recorded_header(argv: list[str], device: str, records: list[dict[str, Any]], runs: int, planned: int,
                    replaced: int = 0) -> str:
    """The header of a report read from records (`--report`): the versions and dates the records say, and
    how many of the planned runs of the tuners are recorded (`runs`), and how many more records are of a
    template since replaced (`replaced`: left out of the tables, to run again)."""
    said: dict[str, set[str]] = {}
    for record in records:
        for name, value in record.get("versions", {}).items():
            said.setdefault(name, set()).add(value)
    unsaid = sum(1 for record in records if "versions" not in record)
    found = {name: " / ".join(sorted(values)) for name, values in said.items()}
    if unsaid:
        found[f"not said by {unsaid} of the {len(records)} records"] = "(written before records carried them)"
    ends = sorted(record["finished"] for record in records if record.get("finished"))
    date = f"runs finished from {ends[0]} to {ends[-1]}" if ends else "no runs recorded"
    left_out = (f" ({replaced} more, of a template the suite has since replaced for their workload, are left out "
                "and run again)") if replaced else ""
    return (header(argv, device, found, date) +
            f"  \nRuns: {runs} of the {planned} planned runs of the tuners are recorded{left_out}; this report "
            "ran none")


def _ci(values: list[float], digits: int) -> str:
    median, low, high = median_ci(values)
    if math.isnan(low):
        return f"{median:.{digits}f}"
    return f"{median:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _median(values: list[float | None], fmt: str) -> str:
    known = [v for v in values if v is not None]
    return format(float(np.median(known)), fmt) if known else "-"


Vendor = tuple["float | None", str]
"""A workload's vendor figure that its runs' ratios divide by (GFLOPS; None: none) and how it was timed."""


def vendor_of(alone: dict[str, Any] | None, runs: list[dict[str, Any]]) -> Vendor:
    """The vendor figure of a workload: the library timed alone after its runs (the protocol's vendor
    record), else the median of the figures timed beside each run, as records written before the vendor was
    timed alone have them (beside runs that shared its process, some of those read slow)."""
    if alone and alone.get("gflops"):
        differs = ", its output differs from the float64 reference" if alone.get("check") else ""
        return alone["gflops"], "alone" + differs
    beside = [r["vendor"]["gflops"] for r in runs if r.get("vendor") and r["vendor"].get("gflops")]
    if beside:
        return float(np.median(beside)), f"median of {len(beside)} beside runs"
    return None, ""


def with_ratio(record: dict[str, Any], vendor: Vendor) -> dict[str, Any]:
    """`record` with the workload's vendor figure and its ratio to it (None where there is none, or where the
    run found no kernel: `failure`)."""
    found = vendor[0] and failure(record) is None
    return {**record, "vendor_gflops": vendor[0], "ratio": record["best_gflops"] / vendor[0] if found else None}


def failure(record: dict[str, Any]) -> str | None:
    """Why a run found no kernel (None where it found one): a search that gave up (MetaSchedule's "found no
    valid schedule") or failed, or whose best schedules did not build.  Such a run is a failure with its
    reason, not a figure of 0 GFLOPS."""
    if record.get("best_gflops", 0.0) > 0:
        return None
    reason = next((r["reason"] for r in record.get("retimed", []) if r.get("reason")), "")
    if reason:
        return reason
    statuses = Counter(step[2] for step in record.get("curve", []))
    return "no candidate ran" + "".join(f"; {n} {status}" for status, n in statuses.most_common())


def _vendor_cell(vendor: Vendor) -> str:
    gflops, how = vendor
    return "-" if gflops is None else f"{gflops:.1f}" + ("" if how == "alone" else f" ({how.removeprefix('alone, ')})")


def _templates(records: list[dict[str, Any]]) -> str:
    """The templates of the runs' best configs: one name, or each with its count where they differ (records of a
    template since replaced, waiting to run again); "-" where none names one (MetaSchedule's own space)."""
    counts = Counter(r["template"] for r in records if r.get("template"))
    return ", ".join(name if len(counts) == 1 else f"{name} x{n}" for name, n in sorted(counts.items())) or "-"


def row(entry: Entry, tuner: str, records: list[dict[str, Any]], vendor: Vendor = (None, "")) -> list[str]:
    """A table row for `tuner` on `entry` from its runs' records (none yet: dashes), their ratios to `vendor`."""
    if not records:
        return [entry.workload, entry.model, tuner, "0", "-", "-", "-", "-", "-", _vendor_cell(vendor)]
    whys = [failure(r) for r in records]
    failed = Counter(why for why in whys if why is not None)
    found = [r for r, why in zip(records, whys) if why is None]
    if not found:
        why, _ = failed.most_common(1)[0]
        return [entry.workload, entry.model, tuner, str(len(records)), f"no kernel in any run: {why[:160]}", "-",
                "-", "-", "-", _vendor_cell(vendor)]
    ratios = [r["ratio"] for r in found if r.get("ratio") is not None]
    best = _ci([r["best_gflops"] for r in found], 1)
    if failed:
        best += f" ({sum(failed.values())} of {len(records)} runs found no kernel: {failed.most_common(1)[0][0][:120]})"
    return [entry.workload, entry.model, tuner, str(len(records)), best,
            _ci(ratios, 2) if len(ratios) == len(found) else "-",
            _median([r["to_fraction"]["trials"] for r in found], "g"),
            _median([r["to_fraction"]["seconds"] for r in found], ".1f"), _templates(found), _vendor_cell(vendor)]


def peer_row(entry: Entry, name: str, record: dict[str, Any] | None) -> list[str]:
    """The row of the peer `name` on `entry` from its record (none: dashes; a failed compilation: its error),
    with the vendor timed right after it."""
    if record is None:
        return [entry.workload, entry.model, name, "0", "-", "-", "-", "-", "-", "-"]
    if "error" in record:
        return [entry.workload, entry.model, name, "1", f"failed: {record['error'][:120]}", "-", "-", "-", "-", "-"]
    differs = " (output differs from the reference)" if record.get("check") else ""
    ratio = f"{record['ratio']:.2f}" if record.get("ratio") is not None else "-"
    library = record.get("vendor") or {}
    return [entry.workload, entry.model, name + differs, "1", f"{record['gflops']:.1f}", ratio, "-",
            f"{record['compile_s']:.1f}", "-", f"{library['gflops']:.1f}" if library.get("gflops") else "-"]


HEAD = ["workload", "model", "tuner", "seeds", "best GFLOPS, median [95 % CI]", "vs vendor, median [95 % CI]",
        "trials to 95 %", "seconds to 95 %", "template", "vendor GFLOPS"]


def table(title: str, rows: list[list[str]], with_vendor: bool) -> str:
    """A set's markdown table, and what its columns mean."""
    lines = [f"## {title}", "", "| " + " | ".join(HEAD) + " |", "| --- | --- | --- |" + " ---: |" * (len(HEAD) - 3),
             *("| " + " | ".join(cells) + " |" for cells in rows), ""]
    lines.append("Best: each run's best of its 3 fastest distinct configs re-timed; medians over seeds, 95 % "
                 "percentile-bootstrap intervals (none for one seed). To 95 %: median trials and seconds until "
                 "a run first reached 95 % of its own best; for torch.compile (one run, its mode "
                 "max-autotune-no-cudagraphs, timed from a CUDA graph as every row is), the seconds its "
                 "compilation and autotuning took.  Template: the suite's kernel family of the runs' best configs "
                 "(trial/templates/).  A run that found no kernel is no figure: the medians leave it out and its "
                 "cell says why.  Vendor: the library timed alone once per workload after its runs, every run's "
                 "ratio divided by it (the peer's by the library timed right after it).")
    if not with_vendor:
        lines.append("Vendor ratios are absent: no vendor figure is recorded for these workloads yet (cuBLAS and "
                     "cuDNN are timed through PyTorch, on CUDA devices only, once a workload's runs are done).")
    return "\n".join(lines)

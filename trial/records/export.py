"""Export of a recorded kernel: compiled library, source, knobs and a report of what tuning gained.

The library is rebuilt from the recorded knobs through the measure path, which leaves it in the
export folder (kernel.so, with its source) and verifies and times that very file, like any trial;
the template's hand-picked config is measured on the same device in the same way, for the report.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .. import check, templates
from ..measure import Options, device, measure
from ..results import MeasureResult, Status
from ..workload import Workload
from .store import Record


class ExportError(RuntimeError):
    """The record cannot be exported on this machine."""


def _figures(result: MeasureResult) -> dict[str, Any]:
    """The report's figures of a measurement, or what went wrong."""
    if result.status != Status.OK:
        return {"error": f"{result.status}: {result.reason}"}
    return {"latency_ms": result.latency_ms, "latency_std_ms": result.latency_std_ms, "gflops": result.gflops,
            "warning": result.warning}


def export(wl: Workload, record: Record, out: Path, target_kind: str = "auto", repeat: int = 10,
           min_repeat_ms: int = 100, trials: int | None = None) -> dict[str, Any]:
    """Write kernel.so, its source, params.json and report.json under `out`; returns the report."""
    target = device(target_kind)
    if record.device != target.device_name:
        raise ExportError(f"the record was measured on {record.device!r} but this machine's {target.kind} "
                          f"device is {target.device_name!r}: export on that machine, or pick a record of "
                          f"this device with --device")
    try:
        check.check(wl, templates.load(wl, target=target, params=record.params), record.params, target)
    except check.InvalidConfig as err:  # e.g. recorded before the template's knobs changed
        raise ExportError(f"the recorded knobs do not fit the template on this device: {err}") from None
    out.mkdir(parents=True, exist_ok=True)
    options = Options(target=target_kind, repeat=repeat, min_repeat_ms=min_repeat_ms)
    tuned = _figures(measure(wl, record.params, options, keep=out))
    if "error" in tuned:
        raise ExportError(f"the exported kernel failed: {tuned['error']}")
    (out / "params.json").write_text(json.dumps(record.params, indent=1) + "\n")
    baseline_run = measure(wl, None, options)
    baseline = _figures(baseline_run)
    report = {
        "workload": wl.key, "target": record.target, "device": record.device, "params": record.params,
        "baseline": {"params": baseline_run.params, **baseline},
        "tuned": {**tuned, "recorded_latency_ms": record.latency_ms, "recorded_gflops": record.gflops,
                  "vs_recorded": (tuned["latency_ms"] / record.latency_ms) if record.latency_ms else None},
        "improvement": (baseline["latency_ms"] / tuned["latency_ms"]) if "latency_ms" in baseline else None,
        "trials": trials, "tuner": record.tuner, "experiment": record.experiment, "trial": record.trial,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.time)),
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "files": sorted(p.name for p in out.iterdir()) + ["report.json"],
    }
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report

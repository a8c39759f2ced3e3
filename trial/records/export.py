"""Export of a recorded kernel: compiled library, source, knobs and a report of what tuning gained.

The library is rebuilt from the recorded knobs, saved with `export_library`, loaded back and run
from the saved file: the report's tuned time is the exported file's own, verified like any trial,
next to the template's hand-picked config timed in the same process on the same device.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import tvm

from .. import build, check, run, templates, verify
from ..target import resolve
from ..workload import Workload
from .store import Record


class ExportError(RuntimeError):
    """The record cannot be exported on this machine."""


def _sources(lib: Any, gpu: bool) -> dict[str, str]:
    if gpu:
        return {"kernel.cu": lib.mod.imports[0].inspect_source()}
    return {"kernel.ll": lib.mod.inspect_source("ll"), "kernel.s": lib.mod.inspect_source("asm")}


def _figures(result: dict[str, Any]) -> dict[str, Any]:
    """The report's figures of a measurement (`run.on_device`), or what went wrong."""
    if result["status"] != "ok":
        return {"error": f"{result['status']}: {result['reason']}"}
    return {key: result[key] for key in ("latency_ms", "latency_std_ms", "gflops")}


def export(wl: Workload, record: Record, out: Path, target_kind: str = "auto", repeat: int = 10,
           min_repeat_ms: int = 100, trials: int | None = None) -> dict[str, Any]:
    """Write kernel.so, its source, params.json and report.json under `out`; returns the report."""
    target = resolve(target_kind)
    if record.device != target.device_name:
        raise ExportError(f"the record was measured on {record.device!r} but this machine's {target.kind} "
                          f"device is {target.device_name!r}: export on that machine, or pick a record of "
                          f"this device with --device")
    template = templates.load(wl.op)
    try:
        check.check(wl, template, record.params, target)
    except check.InvalidConfig as err:  # e.g. recorded before the template's knobs changed
        raise ExportError(f"the recorded knobs do not fit the template on this device: {err}") from None
    lib = build.build(wl, template, record.params, target)
    out.mkdir(parents=True, exist_ok=True)
    library = out / "kernel.so"
    lib.export_library(str(library))
    for name, text in _sources(lib, target.is_gpu).items():
        (out / name).write_text(text)
    (out / "params.json").write_text(json.dumps(record.params, indent=1) + "\n")
    loaded = tvm.runtime.load_module(str(library))
    reference = verify.Reference.of(wl)
    tuned = _figures(run.on_device(loaded, target, reference, repeat, min_repeat_ms))
    if "error" in tuned:
        raise ExportError(f"the exported kernel failed: {tuned['error']}")
    baseline_params = template.default_params(wl, target.is_gpu)
    try:  # compiled before taking the device, like every measurement
        check.check(wl, template, baseline_params, target)
        baseline_mod = build.build(wl, template, baseline_params, target).mod
        baseline = _figures(run.on_device(baseline_mod, target, reference, repeat, min_repeat_ms))
    except (check.InvalidConfig, RuntimeError) as err:  # TVM errors are RuntimeErrors
        baseline = {"error": str(err)}
    report = {
        "workload": wl.key, "target": record.target, "device": record.device, "params": record.params,
        "baseline": {"params": baseline_params, **baseline},
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

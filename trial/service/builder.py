"""Build stage as the measuring service runs it in its build workers: check, compile, export a library.

Build workers never touch a GPU: they compile for the target the service found (its description)
and write a shared library, which the device's runner loads (`runner.run_library`), as
MetaSchedule's builder hands its runner an exported artifact.  They compile on the cores that CPU
kernels are timed on, so a build holds the CPU's lock shared and waits while a CPU timing holds it
(trial/devicelock.py says why); its deadline starts once it holds it (WAIT_FOR_CPU_S till then).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from .. import build, check, devicelock, diskfull, templates
from ..results import Status, error_reason
from ..target import Target
from ..workload import parse
from .worker import cpu_seconds, report


def warm() -> None:
    """Pay the imports (TVM's, through `build`) before the first build arrives: importing this module did."""


def _sources(lib: Any, gpu: bool) -> dict[str, str]:
    if gpu:
        return {"kernel.cu": lib.mod.imports[0].inspect_source()}
    return {"kernel.ll": lib.mod.inspect_source("ll"), "kernel.s": lib.mod.inspect_source("asm")}


def build_library(op: str, spec: str, params: dict[str, Any] | None, template_name: str | None,
                  target: dict[str, Any], path: str, sys_path: list[str], sources: bool = False) -> dict[str, Any]:
    """Build `params` (None: the hand-picked config; a twin proposal as `check.decode` reads it) into a library
    at `path`, with its source beside it if `sources` (kernel.cu, or kernel.ll and kernel.s on the CPU).

    Returns {"status": "built", "params", "build_s", "cpu_s", "algorithm"} (cpu_s: the CPU seconds of the
    build and the linker; algorithm: how the kernel computes, which its verification needs, trial/verify.py)
    or {"status": "invalid" | "compile_error", "reason", "params"}.
    `sys_path` is the requesting process's, so a template of its own (`--template`) imports.
    """
    sys.path.extend(p for p in sys_path if p not in sys.path)
    wl = parse(op, spec)
    tgt = Target.from_description(target)
    template = templates.load(wl, template_name, tgt, params)
    params = template.default_params(wl, tgt.is_gpu) if params is None else check.decode(wl, template, params, tgt)
    try:
        check.check(wl, template, params, tgt)
    except check.InvalidConfig as err:
        return {"status": Status.INVALID, "reason": str(err), "params": params}
    with devicelock.cores(exclusive=False, waiting=lambda: report("waiting")):
        report("building")
        start, cpu = time.perf_counter(), cpu_seconds()
        try:
            lib = build.build(wl, template, params, tgt)
            lib.export_library(path)  # objects in a temporary folder, then linked at `path`
            built = time.perf_counter() - start
            for name, text in (_sources(lib, tgt.is_gpu) if sources else {}).items():
                (Path(path).parent / name).write_text(text)
        except Exception as err:  # any failure to schedule, compile or link is this config's compile error
            full = diskfull.full(err, Path(path).parent, *diskfull.temp_folders())  # unless the disk is full
            reason = f"{full}: {error_reason(err)}" if full else error_reason(err)
            return {"status": Status.COMPILE_ERROR, "reason": reason, "params": params}
    how = getattr(template, "algorithm", None)
    return {"status": "built", "params": params, "build_s": built, "cpu_s": cpu_seconds() - cpu,
            "algorithm": how(wl, params) if how else "direct"}

"""Build stage as the measuring service runs it in its build workers: check, compile, export a library.

Build workers never touch a GPU: they compile for the target the service found (its description)
and write a shared library, which the device's runner loads (`runner.run_library`), as
MetaSchedule's builder hands its runner an exported artifact.
"""
from __future__ import annotations

import sys
import time
from typing import Any

import tvm  # noqa: F401  (imported once per worker, at its first call)

from searchspace import from_twin

from .. import build, check, templates
from ..results import error_reason
from ..target import Target
from ..workload import parse


def warm() -> None:
    """Pay the imports before the first build arrives (the module's own import did it)."""


def build_library(op: str, spec: str, params: dict[str, Any] | None, template_name: str | None,
                  target: dict[str, Any], path: str, sys_path: list[str]) -> dict[str, Any]:
    """Build `params` (None: the hand-picked config; twin-encoded ones are decoded) into a library at `path`.

    Returns {"status": "built", "params", "build_s"} or {"status": "invalid" | "compile_error", "reason",
    "params"}.  `sys_path` is the requesting process's, so a template of its own (`--template`) imports.
    """
    sys.path.extend(p for p in sys_path if p not in sys.path)
    wl = parse(op, spec)
    tgt = Target.from_description(target)
    template = templates.load(op, template_name)
    params = template.default_params(wl, tgt.is_gpu) if params is None else from_twin(template.search_space(wl), params)
    try:
        check.check(wl, template, params, tgt)
    except check.InvalidConfig as err:
        return {"status": "invalid", "reason": str(err), "params": params}
    start = time.perf_counter()
    try:
        build.build(wl, template, params, tgt).export_library(path)
    except Exception as err:  # any failure to schedule, compile or link is this config's compile error
        return {"status": "compile_error", "reason": error_reason(err), "params": params}
    return {"status": "built", "params": params, "build_s": time.perf_counter() - start}

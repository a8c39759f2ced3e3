"""Measure one knob configuration: check, build, run, verify and time it, through the measuring service.

The calling process (an nnictl trial, the benchmark driver, a test) imports no TVM and touches no
device: it checks the knobs against the device's limits as the service last found them (see
target.save), which rejects most of a factor space in microseconds, and sends the rest to this
machine's measuring service (trial/service/), whose warm build workers and device runners do the
work.  A configuration that fails is a result like any other (`Status`); where the time of a
measurement went is kept in `MeasureResult.extra["stages"]` (results.STAGES), the CPU seconds
of its build and run in `extra["cpu_s"]`, and when it took and gave back the device's lock in
`extra["device_s"]` (`time.time()`).  The nnictl trial and
the benchmarks share this one path.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import check, target, templates
from .remote import LOCAL
from .service import client
from .results import STAGES, MeasureResult, Status
from .target import Target, TargetError
from .workload import Workload

_MARKS = ("start", "received", "building", "built", "held", "done", "end")
"""The moments of a measurement, in order; the stage after each (results.STAGES) runs until the next."""


@dataclass(frozen=True)
class Options:
    target: str = "auto"
    build_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    repeat: int = 5
    min_repeat_ms: int = 40
    seed: int = 0
    template: str | None = None  # "module[:attr]" replacing the op's template (see templates.load)
    runner: str = LOCAL  # where kernels are verified and timed (trial/remote.py)


def _precheck(wl: Workload, params: dict[str, Any] | None, options: Options) -> MeasureResult | None:
    """An `invalid` result if the workload does not fit in memory or the knobs are bad for the device the
    service found here, else None (also where there is no such device: the service reports that)."""
    try:
        known = device(options.target, options.runner)
    except (TargetError, client.ServiceError):
        return None
    problem = check.memory_problem(wl, known)
    if problem:
        return MeasureResult(Status.INVALID, problem, params, target=known.label, device=known.device_name)
    if params is None:
        return None
    template = templates.load(wl, options.template, known, params)
    params = check.decode(wl, template, params, known)
    try:
        check.check(wl, template, params, known)
    except check.InvalidConfig as err:
        return MeasureResult(Status.INVALID, str(err), params, target=known.label, device=known.device_name)
    return None


def _stages(marks: dict[str, float]) -> dict[str, float]:
    """Seconds per stage from the moments a measurement reached (absent ones are skipped)."""
    reached = [m for m in _MARKS if m in marks]
    after = dict(zip(_MARKS, STAGES))
    return {after[m]: marks[later] - marks[m] for m, later in zip(reached, reached[1:])}


def _request(wl: Workload, params: dict[str, Any] | None, options: Options, **where: str) -> MeasureResult:
    start = time.time()
    try:
        answer = client.request({"request": "measure", "op": wl.op, "spec": wl.spec, "params": params,
                                 "options": asdict(options), "sys_path": sys.path, **where})
    except client.ServiceError as err:
        return MeasureResult(Status.RUNTIME_ERROR, str(err), params)
    marks = {"start": start, **answer.pop("marks", {}), "end": time.time()}
    extra = answer.pop("extra", {})
    cpu = {stage: s for stage, s in answer.pop("cpu_s", {}).items() if s is not None}
    held = {m: marks[m] for m in ("held", "released") if m in marks}
    return MeasureResult(**answer, extra={**extra, "stages": _stages(marks), "cpu_s": cpu, "device_s": held})


def measure(wl: Workload, params: dict[str, Any] | None, options: Options = Options(),
            keep: Path | None = None) -> MeasureResult:
    """Measure `params` (None: the template's hand-picked config) for `wl`; never raises for a bad config.

    With `keep`, the built library stays in that folder as kernel.so, with its source (an export).
    """
    rejected = _precheck(wl, params, options)
    if rejected:
        return rejected
    return _request(wl, params, options, **({"keep": str(keep.resolve())} if keep else {}))


def measure_library(wl: Workload, library: Path, options: Options = Options()) -> MeasureResult:
    """Verify and time a library built elsewhere (its kernel `main` takes the workload's buffers), exactly
    as a measurement's own library is: e.g. MetaSchedule's best schedule."""
    return _request(wl, None, options, library=str(library.resolve()))


def device(kind: str = "auto", runner: str = LOCAL) -> Target:
    """The target a trial with `--target kind --runner runner` would use: the one found last (the cache),
    else the service's answer; TargetError where there is none.  The caller holds no device and imports no TVM."""
    known = target.load(kind, runner)
    if known is not None:
        return known
    answer = client.request({"request": "describe", "target": kind, "runner": runner})
    if "error" in answer:
        raise TargetError(answer["error"])
    return Target.from_description(answer["target"])


def this_device(kind: str = "auto", runner: str = LOCAL) -> str:
    """The model name of the device a trial would use (see `device`)."""
    return device(kind, runner).device_name

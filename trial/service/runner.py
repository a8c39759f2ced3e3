"""Run stage as the measuring service runs it: one runner worker per device, which keeps that device's
context warm and loads, verifies and times the libraries the build workers export.

The reference outputs of a workload are computed once per runner and kept (the last few
workloads), outside the device lock.  A kernel that fails in any way other than a wrong answer
may have left the device context unusable (a misaligned access does), so the runner says so and
the service replaces it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import tvm

from .. import devicelock, run, verify
from ..results import Status, error_reason
from ..target import Target, TargetError, resolve
from ..workload import parse
from .worker import report

_REFERENCES: OrderedDict[tuple[str, int], verify.Reference] = OrderedDict()
KEPT_REFERENCES = 3


def describe(kind: str) -> dict[str, Any]:
    """{"target": what `resolve(kind)` finds here, as data} or {"error": why there is none}.

    Querying a GPU makes this runner hold a context on its device 0, which it then serves.
    """
    try:
        return {"target": resolve(kind).describe()}
    except TargetError as err:
        return {"error": str(err)}


def warm(target: dict[str, Any], index: int) -> None:
    """Create the device's context now, so the first measurement does not wait for it."""
    Target.from_description(target).device(index).exist


def _reference(op: str, spec: str, seed: int) -> verify.Reference:
    key = (f"{op}/{spec}", seed)
    if key not in _REFERENCES:
        _REFERENCES[key] = verify.Reference.of(parse(op, spec), seed)
        while len(_REFERENCES) > KEPT_REFERENCES:
            _REFERENCES.popitem(last=False)
    _REFERENCES.move_to_end(key)
    return _REFERENCES[key]


def run_library(path: str, op: str, spec: str, seed: int, repeat: int, min_repeat_ms: int,
                target: dict[str, Any], index: int) -> dict[str, Any]:
    """Verify and time the library at `path` on device `index`: a measurement's status and figures.

    Reports "held" once the device's lock is held; {"replace": True} asks for a fresh runner.
    """
    tgt = Target.from_description(target)
    reference = _reference(op, spec, seed)
    with devicelock.hold(tgt.kind, index, tgt.num_devices):
        report("held", index)
        try:
            timing = run.run(tvm.runtime.load_module(path), tgt.device(index), reference, repeat, min_repeat_ms)
        except run.WrongResult as err:
            return {"status": Status.WRONG_RESULT, "reason": str(err)}
        except Exception as err:  # a launch failure, a CUDA error: the context may be lost
            return {"status": Status.RUNTIME_ERROR, "reason": error_reason(err), "replace": True}
    return {"status": Status.OK, **timing.metrics(reference.wl)}

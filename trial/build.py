"""Build stage: schedule the template with the knob values and compile for the target."""
from __future__ import annotations

from typing import Any

import tvm

from .target import Target
from .workload import Workload


def build(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> Any:
    """Schedule and compile to a tvm.runtime.Executable; TVM errors propagate (compile errors).

    Asynchronous copies are lowered only where the target has them; schedules that ask for none are
    unaffected by the setting.
    """
    mod = template.schedule(wl, params, target)
    with tvm.transform.PassContext(config={"tirx.use_async_copy": target.async_copy}):
        return tvm.compile(mod, target=target.target)

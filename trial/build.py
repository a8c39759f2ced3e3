"""Build stage: schedule the template with the knob values and compile for the target."""
from __future__ import annotations

from typing import Any

import tvm

from .target import Target
from .workload import Workload


def build(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> Any:
    """Schedule and compile to a tvm.runtime.Executable; TVM errors propagate (compile errors)."""
    return tvm.compile(template.schedule(wl, params, target.is_gpu), target=target.target)

"""Knob checks before anything is compiled: in the search space, and within the device's rules.

Pure Python (no TVM), so a trial can reject a bad configuration at once, without asking the measuring
service.  The device's rules are the ones the search spaces and tuners keep (trial/constraints.py).
"""
from __future__ import annotations

from typing import Any

from searchspace import SearchSpace, SpaceError

from .constraints import KernelRules
from .target import Target
from .workload import Workload


class InvalidConfig(ValueError):
    """Knob values that cannot make a kernel for this workload on this device."""


def check(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> None:
    """Raise InvalidConfig if `params` are not in the template's space or break the device's rules."""
    try:
        SearchSpace.from_json(template.search_space(wl)).validate(params)
    except SpaceError as err:
        raise InvalidConfig(str(err)) from None
    problems = KernelRules(wl, template, target).problems(params)
    if problems:
        raise InvalidConfig("; ".join(problems))

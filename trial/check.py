"""Checks before anything is compiled: the workload fits in memory, the knobs are in the search space
and within the device's rules.

Pure Python (no TVM), so a trial can reject a bad configuration at once, without asking the measuring
service.  The device's rules are the ones the search spaces and tuners keep (trial/constraints.py).
"""
from __future__ import annotations

from typing import Any

import psutil

from searchspace import SearchSpace, SpaceError

from .constraints import KernelRules
from .target import Target
from .workload import Workload


HEADROOM = 0.9
"""Share of a memory that one measurement's buffers may take: the runtime and the allocator need the rest."""


class InvalidConfig(ValueError):
    """Knob values that cannot make a kernel for this workload on this device."""


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def memory_problem(wl: Workload, target: Target) -> str | None:
    """Why `wl`'s inputs and output cannot be allocated where a measurement would hold them, or None.

    The runner creates them on the host, then copies them to the device.
    """
    need = wl.buffer_bytes
    if target.is_gpu and target.memory_bytes and need > HEADROOM * target.memory_bytes:
        return (f"{wl.name} is too large for {target.device_name}: its inputs and output take {_gib(need)}, "
                f"more than {HEADROOM:.0%} of the device's {_gib(target.memory_bytes)}")
    available = psutil.virtual_memory().available
    if need > HEADROOM * available:
        return (f"{wl.name} is too large for this machine: its inputs and output take {_gib(need)}, "
                f"more than {HEADROOM:.0%} of the {_gib(available)} of host memory available now")
    return None


def check(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> None:
    """Raise InvalidConfig if `params` are not in the template's space or break the device's rules."""
    try:
        SearchSpace.from_json(template.search_space(wl)).validate(params)
    except SpaceError as err:
        raise InvalidConfig(str(err)) from None
    problems = KernelRules(wl, template, target).problems(params)
    if problems:
        raise InvalidConfig("; ".join(problems))

"""Build stage: knob checks against the search space and the device's limits, then compilation."""
from __future__ import annotations

from typing import Any

import tvm

from tuners.space import SearchSpace, SpaceError

from .target import Target
from .workload import Workload


class InvalidConfig(ValueError):
    """Knob values that cannot make a kernel for this workload on this device."""


def check(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> None:
    """Raise InvalidConfig if `params` are not in the template's space or exceed the device's limits."""
    try:
        SearchSpace.from_json(template.search_space(wl)).validate(params)
    except SpaceError as err:
        raise InvalidConfig(str(err)) from None
    if not target.is_gpu:
        return
    lim, use = target.limits, template.resources(wl, params)
    if use["threads"] > lim.max_threads_per_block:
        raise InvalidConfig(f"{use['threads']} threads per block > device limit {lim.max_threads_per_block}")
    for axis, n, most in zip("xyz", use["thread_dims"], lim.max_thread_dims):
        if n > most:
            raise InvalidConfig(f"threadIdx.{axis} extent {n} > device limit {most}")
    if use["shared_bytes"] > lim.max_shared_memory_per_block:
        raise InvalidConfig(f"{use['shared_bytes']} bytes of shared memory per block > device limit "
                            f"{lim.max_shared_memory_per_block}")
    regs = use["registers_per_thread"]
    if regs > lim.max_registers_per_thread:
        raise InvalidConfig(f"about {regs} registers per thread > device limit {lim.max_registers_per_thread}")
    if regs * use["threads"] > lim.max_registers_per_block:
        raise InvalidConfig(f"about {regs} registers x {use['threads']} threads > "
                            f"{lim.max_registers_per_block} registers per block")


def build(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> Any:
    """Schedule and compile to a tvm.runtime.Executable; TVM errors propagate (compile errors)."""
    return tvm.compile(template.schedule(wl, params, target.is_gpu), target=target.target)

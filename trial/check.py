"""Knob checks before anything is compiled: in the search space, and within the device's limits.

Pure Python (no TVM), so the supervising process can reject a bad configuration at once, without
starting a measuring process.
"""
from __future__ import annotations

from typing import Any

from searchspace import SearchSpace, SpaceError

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
    if use.get("async_copy") and not target.async_copy:
        raise InvalidConfig(f"asynchronous copies (cp.async) need CUDA sm_80 or newer, not {target.device_name}")
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

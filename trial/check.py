"""Checks before anything is compiled: the workload fits in memory, the knobs are in the search space
and within the device's rules.

Pure Python (no TVM), so a trial can reject a bad configuration at once, without asking the measuring
service.  The device's rules are the ones the search spaces and tuners keep (trial/constraints.py).
"""
from __future__ import annotations

import json
import random
from typing import Any

import psutil

from searchspace import ConstrainedSpace, SearchSpace, SpaceError, from_twin

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
    arch = None if target.is_gpu else template.resources(wl, params).get("exact_cuda_arch")
    if arch:  # a kernel of one GPU architecture's instructions, with no CPU schedule
        raise InvalidConfig(f"these instructions exist on CUDA sm_{arch} GPUs only, not on {target.device_name}: "
                            f"{template.__name__.rpartition('.')[2]}'s knobs have no CPU kernel")
    problems = KernelRules(wl, template, target).problems(params)
    if problems:
        raise InvalidConfig("; ".join(problems))


def decode(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> dict[str, Any]:
    """The configuration a proposal stands for on `target`.

    Native configurations (the suite's tuners, `--params`) come back unchanged, for `check` to judge.  A
    twin proposal (NNI's built-in tuners search the space's twin in NNI's standard types,
    searchspace/twin.py) is decoded, and where it breaks the device's rules it stands for the nearest
    configuration that keeps them (`ConstrainedSpace.repair`, seeded by the proposal, so one proposal always
    measures one kernel).  NNI's types draw each knob on its own and cannot say rules that couple them
    (threads from X and Y, shared memory from X, Y and K), so without this most of their trials would be
    kernels the device cannot run.  The twin of a space of plain choices would read as native but for its
    marker parameter (searchspace/twin.py), which `from_twin` drops: its proposals are repaired too.
    """
    space = SearchSpace.from_json(template.search_space(wl))
    config = from_twin(space, params)
    if config == params or space.problems(config):
        return config
    rules = KernelRules(wl, template, target)
    if rules.excess(config) == 0:
        return config
    try:
        return ConstrainedSpace.of(space, rules).repair(config, random.Random(json.dumps(config, sort_keys=True)))
    except SpaceError:  # the device runs no configuration near it: `check` says why
        return config

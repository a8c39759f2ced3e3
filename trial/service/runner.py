"""Run stage as the measuring service runs it: runner workers (two a GPU: pools.py), each keeping a
context on its device warm, which load, verify and time the libraries the build workers export.

The runner of an RPC runner's server holds a session with it instead (rpcsession.py): it uploads the
library there and verifies and times it on the server's device.  The reference outputs of a
workload are computed once per runner and kept (the last few workloads), outside the device lock; its
tensors and the kernel that gathers its checked outputs are kept on the device (kept.py, gather.py).
A kernel that fails in any way other than a wrong answer may have left the device context unusable
(a misaligned access does), so the runner says so and the service replaces it.  Each timing says
how far it can be trusted (its `warning`, trial/noise.py).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import tvm

from .. import devicelock, noise, run, verify
from ..results import Status, error_reason
from ..remote import LOCAL, rpc_address
from ..target import Target, TargetError, resolve
from ..workload import parse
from . import gather, kept, rpcsession
from .worker import cpu_seconds, report

_REFERENCES: OrderedDict[tuple[str, int], verify.Reference] = OrderedDict()
KEPT_REFERENCES = 3


def describe(kind: str, runner: str = LOCAL) -> dict[str, Any]:
    """{"target": what `resolve(kind)` finds through `runner`, as data} or {"error": why there is none}.

    Querying a GPU makes this runner hold a context on its device 0 (or a session with one of the
    runner's servers), which it then serves.  Through RPC, `num_devices` counts the key's servers:
    one runner each.
    """
    try:
        if runner == LOCAL:
            return {"target": resolve(kind).describe()}
        with rpcsession.session(runner) as remote:
            found = resolve(kind, remote).describe()
        return {"target": {**found, "num_devices": rpcsession.servers(rpc_address(runner))[0]}}
    except TargetError as err:
        return {"error": str(err)}
    except Exception as err:  # the tracker or server refused or went away
        return {"error": f"could not query the device through {runner}: {error_reason(err)}"}


def warm(target: dict[str, Any], index: int, runner: str = LOCAL) -> None:
    """Create the device's context (or take a free server's session) now, so the first measurement does
    not wait; raises where an RPC runner has no free server (the service then retires this runner)."""
    tgt = Target.from_description(target)
    if runner == LOCAL:
        tgt.device(index).exist
    else:
        with rpcsession.session(runner, wait=False) as remote:
            remote.device(tgt.device_type, 0).exist


def _reference(op: str, spec: str, seed: int) -> verify.Reference:
    key = (f"{op}/{spec}", seed)
    if key not in _REFERENCES:
        _REFERENCES[key] = verify.Reference.of(parse(op, spec), seed)
        while len(_REFERENCES) > KEPT_REFERENCES:
            _REFERENCES.popitem(last=False)
    _REFERENCES.move_to_end(key)
    return _REFERENCES[key]


def _free_memory(tgt: Target, index: int) -> str:
    """How much of the device's memory was free after an error, so that a failed allocation tells whether
    other processes had filled the device ("" where the context no longer answers)."""
    try:
        dev = tgt.device(index)
        free, total = dev.available_global_memory, dev.total_global_memory
    except Exception:  # the error left no usable context
        return ""
    return "" if free is None else f" (device memory free: {free / 2**30:.1f} of {total / 2**30:.1f} GiB)"


@contextmanager
def _loaded(mod: Any, path: str, tgt: Target, index: int, runner: str, key: tuple[str, int],
            reference: verify.Reference, gathering: str) -> Iterator[tuple[Any, Any, list[Any] | None, Any, Any]]:
    """The library on the device it runs on (`mod`: already loaded here), that device, and the workload's
    inputs and unwritten output kept there, fresh, with what gathers a run's checked outputs there
    (kept.py; None: the run makes its tensors and reads the whole output).  `gathering`: the gather
    kernel's library, built here."""
    if runner == LOCAL:
        dev = tgt.device(index)
        yield mod, dev, *kept.prepared(f"local:{index}", key, reference, dev,
                                       lambda: tvm.runtime.load_module(gathering)["main"])
    else:
        with rpcsession.loaded(runner, path, tgt.device_type) as (remote_mod, dev):
            yield remote_mod, dev, *kept.prepared(runner, key, reference, dev,
                                                  lambda: rpcsession.module(runner, gathering)["main"])


def run_library(path: str, op: str, spec: str, seed: int, repeat: int, min_repeat_ms: int,
                target: dict[str, Any], index: int, runner: str = LOCAL, algorithm: str = "direct") -> dict[str, Any]:
    """Verify (as a kernel computing by `algorithm`, verify.ALGORITHMS) and time the library at `path` on
    device `index` (through `runner`): a measurement's status and figures.

    Reports "held" once the device's lock is held and "released" once it is not (an RPC server serves one
    session at a time: there the session is the lock); {"replace": True} asks for a fresh runner.  A
    local library is loaded before the lock (host work: the device's module loads at the first call);
    "cpu_s" is this call's CPU seconds; extra["run_s"] the seconds of its steps under the lock: "load"
    (through RPC the library's upload and load; the kept tensors' copies, kept.py) and those of `run.run`.
    """
    cpu = cpu_seconds()
    tgt = Target.from_description(target)
    reference = _reference(op, spec, seed)
    gathering = gather.library(reference.wl, len(reference.flat_indices), tgt)  # once a workload, before the lock
    try:
        mod = tvm.runtime.load_module(path) if runner == LOCAL else None
    except Exception as err:  # an unreadable library: this measurement's error, the device untouched
        return {"status": Status.RUNTIME_ERROR, "reason": f"could not load the library: {error_reason(err)}"}
    lock = devicelock.hold(tgt.kind, index, tgt.num_devices) if runner == LOCAL else nullcontext()
    load = noise.OthersLoad() if runner == LOCAL and not tgt.is_gpu else None  # a host's load disturbs its CPU
    failed = None
    with lock:
        report("held", index)
        held = time.perf_counter()
        try:
            key = (f"{op}/{spec}", seed)
            with _loaded(mod, path, tgt, index, runner, key, reference, gathering) as (kernel, dev, *tensors), \
                    load or nullcontext():
                args, out, sample = tensors
                loaded_s = time.perf_counter() - held
                timing = run.run(kernel, dev, reference, repeat, min_repeat_ms, args, algorithm, out, sample)
        except run.WrongResult as err:
            failed = {"status": Status.WRONG_RESULT, "reason": str(err), "cpu_s": cpu_seconds() - cpu}
        except Exception as err:  # a launch failure, a CUDA error, a lost server: the context may be lost
            where = "" if runner == LOCAL else f"{runner}: "
            reason = where + error_reason(err) + (_free_memory(tgt, index) if runner == LOCAL else "")
            failed = {"status": Status.RUNTIME_ERROR, "reason": reason, "replace": True}
    report("released", index)
    if failed:
        return failed
    figures = timing.metrics(reference.wl)
    figures["extra"]["run_s"] = {"load": loaded_s, **timing.parts}
    warning = noise.warning(figures["latency_ms"], figures["latency_std_ms"], load)
    return {"status": Status.OK, **figures, "warning": warning, "cpu_s": cpu_seconds() - cpu}

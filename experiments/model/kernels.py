"""Tuned kernels as a torch operator: `opevo::kernel(a, b, workload)`, a torch.library custom op.

A kernel is the best verified record of its workload on this device, rebuilt through the suite's own
measure path (as `trial/records/export.py` does: the service builds it from the recorded knobs,
verifies and times that very library) into a folder beside the records store, once per device,
workload and knobs; later processes load the library from there.  The service writes kernel.so before
it verifies it, so the build goes to a temporary sibling folder, renamed into place only once the
kernel passed, with a VERIFIED mark: a crash mid-build leaves no unverified kernel where it is loaded
from, and a process never loads one that another is still writing.  TVM's runtime calls it on the
torch tensors in place: tvm_ffi takes a torch.Tensor through DLPack without a copy, and on a GPU sets
torch's current CUDA stream as the call's stream (tvm_ffi/cython/function.pxi), so the kernel runs
in order with torch's work and inside a CUDA graph being captured.  The fake implementation gives
the output's shape and type from the workload alone, so torch.compile traces around the kernel.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trial.measure import Options, measure
from trial.records import Records
from trial.records.store import params_key
from trial.results import Status
from trial.target import Target
from trial.workload import parse_name

from .errors import ModelError

CALLS: Counter[str] = Counter()
"""Calls of each workload's tuned kernel in this process (what ran through TVM rather than torch)."""
VERIFIED = "VERIFIED"
"""The mark of a kernel folder whose kernel.so passed the measure path's verification."""


@dataclass(frozen=True)
class _Loaded:
    """A loaded kernel: its function and what it writes, read from the workload once, at load."""

    workload: str
    main: Any  # the library's function "main"
    shape: tuple[int, ...]
    dtype: torch.dtype


_LOADED: dict[str, _Loaded] = {}  # kernel id (workload@library) -> the loaded kernel


def _output(workload: str) -> tuple[tuple[int, ...], torch.dtype]:
    wl = parse_name(workload)
    return tuple(wl.output_shape), getattr(torch, wl.out_dtype)


@torch.library.custom_op("opevo::kernel", mutates_args=())
def kernel(a: torch.Tensor, b: torch.Tensor, kernel_id: str) -> torch.Tensor:
    """Run the loaded kernel `kernel_id` (`load`'s answer) on the operands as it reads them (contiguous, in
    its workload's layout)."""
    k = _LOADED[kernel_id]
    out = torch.empty(k.shape, dtype=k.dtype, device=a.device)
    k.main(a, b, out)
    CALLS[k.workload] += 1
    return out


@kernel.register_fake
def _(a: torch.Tensor, b: torch.Tensor, kernel_id: str) -> torch.Tensor:
    k = _LOADED.get(kernel_id)
    shape, dtype = (k.shape, k.dtype) if k else _output(kernel_id.partition("@")[0])
    return a.new_empty(shape, dtype=dtype)


def best(workload: str, target: Target | None, records: Records | None = None) -> Any:
    """The fastest verified record of `workload` on this device (None: on any device), its knobs as the
    template takes them now; None if there is none."""
    return (records or Records()).best_kernel(parse_name(workload), target.device_name if target else None)


def folder(workload: str, params: dict[str, Any], target: Target, records: Records | None = None) -> Path:
    """Where the library of these knobs is kept: kernels/<device>/<workload>/<knobs hash> beside the records."""
    digest = hashlib.sha256(params_key(params).encode()).hexdigest()[:16]
    device = "".join(c if c.isalnum() else "_" for c in target.device_name)
    return (records or Records()).path.parent / "kernels" / device / workload.replace("/", "_") / digest


def build(workload: str, params: dict[str, Any], target: Target, kind: str = "auto",
          records: Records | None = None) -> Path:
    """The library of `params` for `workload`: built, verified and timed through the measure path the first
    time, then reused; ModelError where the build or its check fails.  Only a folder with the VERIFIED mark
    is trusted; another (a build of a crashed run) is built again."""
    out = folder(workload, params, target, records)
    if not (out / VERIFIED).exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-build-"))
        try:
            result = measure(parse_name(workload), params, Options(target=kind), keep=building)
            if result.status != Status.OK:
                raise ModelError(f"the recorded kernel of {workload} failed on {target.device_name}: "
                                 f"{result.status}: {result.reason[:300]}")
            (building / VERIFIED).write_text(f"{result.gflops} GFLOPS, {result.latency_ms} ms\n")
            _install(building, out)
        finally:
            shutil.rmtree(building, ignore_errors=True)  # gone already where it was renamed into place
    return out / "kernel.so"


def _install(building: Path, out: Path) -> None:
    """Rename the verified build into place; where another process's verified build got there first, theirs
    stays (and ours is removed by the caller)."""
    if out.exists() and not (out / VERIFIED).exists():  # an unverified leftover: never loaded, replaced
        stale = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-stale-"))
        try:
            os.replace(out, stale)
        except OSError:  # another process moved it first
            pass
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(building, out)
    except OSError:  # out exists again, not empty: another process's verified build won the race
        if not (out / VERIFIED).exists():
            raise


def load(workload: str, library: Path) -> str:
    """Load `library` (a kernel of `workload`) into this process; the id by which `opevo::kernel` runs it."""
    kernel_id = f"{workload}@{library.resolve()}"
    if kernel_id not in _LOADED:
        import tvm

        shape, dtype = _output(workload)
        _LOADED[kernel_id] = _Loaded(workload, tvm.runtime.load_module(str(library))["main"], shape, dtype)
    return kernel_id

"""Tuned kernels as a torch operator: `opevo::kernel(a, b, workload)`, a torch.library custom op.

A kernel is the best verified record of its workload on this device, rebuilt through the suite's own
measure path (as `trial/records/export.py` does: the service builds it from the recorded knobs,
verifies and times that very library) into a folder beside the records store, once per device,
workload and knobs; later processes load the library from there.  TVM's runtime calls it on the
torch tensors in place: tvm_ffi takes a torch.Tensor through DLPack without a copy, and on a GPU sets
torch's current CUDA stream as the call's stream (tvm_ffi/cython/function.pxi), so the kernel runs
in order with torch's work and inside a CUDA graph being captured.  The fake implementation gives
the output's shape and type from the workload alone, so torch.compile traces around the kernel.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from trial.measure import Options, measure
from trial.records import Records
from trial.records.store import as_template_takes, params_key
from trial.results import Status
from trial.target import Target
from trial.workload import parse_name

from .errors import ModelError

CALLS: Counter[str] = Counter()
"""Calls of each workload's tuned kernel in this process (what ran through TVM rather than torch)."""
_LOADED: dict[str, Any] = {}  # kernel id (workload@library) -> the library's function "main"


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


@torch.library.custom_op("opevo::kernel", mutates_args=())
def kernel(a: torch.Tensor, b: torch.Tensor, kernel_id: str) -> torch.Tensor:
    """Run the loaded kernel `kernel_id` (`load`'s answer) on the operands as it reads them (contiguous, in
    its workload's layout)."""
    workload = kernel_id.partition("@")[0]
    wl = parse_name(workload)
    out = torch.empty(wl.output_shape, dtype=_torch_dtype(wl.out_dtype), device=a.device)
    _LOADED[kernel_id](a, b, out)
    CALLS[workload] += 1
    return out


@kernel.register_fake
def _(a: torch.Tensor, b: torch.Tensor, kernel_id: str) -> torch.Tensor:
    wl = parse_name(kernel_id.partition("@")[0])
    return a.new_empty(wl.output_shape, dtype=_torch_dtype(wl.out_dtype))


def best(workload: str, target: Target | None, records: Records | None = None) -> Any:
    """The fastest verified record of `workload` on this device (None: on any device), its knobs as the
    template takes them now; None if there is none."""
    found = (records or Records()).best(workload, target.device_name if target else None,
                                        fits=as_template_takes(parse_name(workload)))
    return found[0] if found else None


def folder(workload: str, params: dict[str, Any], target: Target, records: Records | None = None) -> Path:
    """Where the library of these knobs is kept: kernels/<device>/<workload>/<knobs hash> beside the records."""
    digest = hashlib.sha256(params_key(params).encode()).hexdigest()[:16]
    device = "".join(c if c.isalnum() else "_" for c in target.device_name)
    return (records or Records()).path.parent / "kernels" / device / workload.replace("/", "_") / digest


def build(workload: str, params: dict[str, Any], target: Target, kind: str = "auto",
          records: Records | None = None) -> Path:
    """The library of `params` for `workload`: built, verified and timed through the measure path the first
    time, then reused; ModelError where the build or its check fails."""
    out = folder(workload, params, target, records)
    library = out / "kernel.so"
    if not library.exists():
        out.mkdir(parents=True, exist_ok=True)
        result = measure(parse_name(workload), params, Options(target=kind), keep=out)
        if result.status != Status.OK:
            library.unlink(missing_ok=True)
            raise ModelError(f"the recorded kernel of {workload} failed on {target.device_name}: "
                             f"{result.status}: {result.reason[:300]}")
    return library


def load(workload: str, library: Path) -> str:
    """Load `library` (a kernel of `workload`) into this process; the id by which `opevo::kernel` runs it."""
    kernel_id = f"{workload}@{library.resolve()}"
    if kernel_id not in _LOADED:
        import tvm

        _LOADED[kernel_id] = tvm.runtime.load_module(str(library))["main"]
    return kernel_id

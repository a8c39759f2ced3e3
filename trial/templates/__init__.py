"""Operator templates: each module turns a Workload and knob values into a scheduled TensorIR module.

A template module provides
  search_space(wl) -> dict              the knobs, in the shared search-space JSON format
  default_params(wl, gpu) -> dict       a hand-picked config
  prim_func(wl) -> PrimFunc             the computation (te compute -> create_prim_func)
  schedule(wl, params, target) -> IRModule  the scheduled kernel for a trial.target.Target
  resources(wl, params) -> dict         threads, thread_dims (x, y, z), shared_bytes,
                                        registers_per_thread of one GPU thread block, and
                                        async_copy if it needs cp.async, min_cuda_arch if it
                                        needs that architecture's tensor cores, exact_cuda_arch
                                        if only that one has its instructions
and may provide
  rules(wl) -> list[Rule]               its own rules beyond the device's limits
  applies(wl, target) -> bool           whether it serves `wl` on `target` (device-specific ones)
  compile_kernel(mod, target)           its own compilation, instead of trial/build.py's pipeline
  algorithm(wl, params) -> str          how the kernel computes where that changes its rounding
                                        (trial/verify.py: ALGORITHMS; "direct" where absent)
  upgrade(wl, params) -> dict           recorded knobs as this version takes them, where knobs were
                                        added or changed since (trial/records/store.py)
Templates import TVM only inside prim_func and schedule, so knob checks stay cheap.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from searchspace import from_twin

from ..workload import Workload

if TYPE_CHECKING:
    from ..target import Target

BY_OP = {"mm": "trial.templates.matmul", "bmm": "trial.templates.matmul", "conv": "trial.templates.conv2d"}
TENSOR_CORE = "trial.templates.tensorcore"  # mm and bmm in the narrow types (trial/dtypes.py)
WGMMA = "trial.templates.wgmma"  # mm, bmm on Hopper: 16-bit types, 8-bit and TF32 with K-major operands (`takes`)
SIMT = "trial.templates.simt"  # float32 mm and bmm on Hopper (its `applies`)
CONV_NHWC = "trial.templates.conv2d_nhwc"  # conv in float16, bfloat16 and TF32, NHWC
CONV_GEMM = "trial.templates.conv2d_gemm"  # their 1x1 stride-1 convolutions on Hopper, as wgmma matmuls
CONV_SIMT = "trial.templates.conv2d_simt"  # float32 1x1 stride-1 convolutions on Hopper, as simt matmuls


def candidates(wl: Workload) -> list[Any]:
    """The template modules that can serve `wl`, the device-specific ones first, the portable one last."""
    if wl.op == "conv" and wl.layout == "NHWC":  # the tensor-core types' convolutions: pointwise ones on wgmma
        return [importlib.import_module(m) for m in (CONV_GEMM, CONV_NHWC)]
    if wl.element.input_bits:  # TF32: Hopper's wgmma kernel; elsewhere float32 on the CUDA cores (exact products)
        return [importlib.import_module(m) for m in (WGMMA, BY_OP[wl.op])]
    if not wl.element.mma_k:
        hopper = {"mm": SIMT, "bmm": SIMT, "conv": CONV_SIMT}[wl.op] if wl.dtype == "float32" else None
        return [importlib.import_module(m) for m in ((hopper, BY_OP[wl.op]) if hopper else (BY_OP[wl.op],))]
    hopper = importlib.import_module(WGMMA).takes(wl)
    return [importlib.import_module(m) for m in ((WGMMA, TENSOR_CORE) if hopper else (TENSOR_CORE,))]


def with_knobs(wl: Workload, names: Iterable[str]) -> Any | None:
    """The template of `candidates(wl)` whose knobs are `names`, or None."""
    names = set(names)
    return next((t for t in candidates(wl) if set(t.search_space(wl)) == names), None)


def load(wl: Workload, name: str | None = None, target: Target | None = None,
         params: Mapping[str, Any] | None = None) -> Any:
    """The template module for `wl`.

    `name` ("pkg.module" or "pkg.module:attr") replaces the choice.  Otherwise, of `candidates(wl)`, the
    one whose knobs `params` has (natively or twin-encoded), since a configuration names its kernel
    family, or the portable one where none has them; without `params`, the first that serves `target`
    (a template's `applies(wl, target)`), else the portable one.
    """
    if name:
        module, _, attr = name.partition(":")
        found = importlib.import_module(module)
        return getattr(found, attr) if attr else found
    found = candidates(wl)
    if params is not None:  # decoded by each template's space: a twin-encoded name is one of its knobs' parts
        return next((t for t in found if with_knobs(wl, from_twin(t.search_space(wl), params)) is t), found[-1])
    return next((t for t in found[:-1] if t.applies(wl, target)), found[-1])

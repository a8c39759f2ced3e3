"""Operator templates: each module turns a Workload and knob values into a scheduled TensorIR module.

A template module provides
  search_space(wl) -> dict              the knobs, in the shared search-space JSON format
  default_params(wl, gpu) -> dict       a hand-picked config
  prim_func(wl) -> PrimFunc             the computation (te compute -> create_prim_func)
  schedule(wl, params, target) -> IRModule  the scheduled kernel for a trial.target.Target
  resources(wl, params) -> dict         threads, thread_dims (x, y, z), shared_bytes,
                                        registers_per_thread of one GPU thread block, and
                                        async_copy if it needs cp.async, min_cuda_arch if it
                                        needs that architecture's tensor cores
Templates import TVM only inside prim_func and schedule, so knob checks stay cheap.
"""
from __future__ import annotations

import importlib
from typing import Any

from ..workload import Workload

BY_OP = {"mm": "trial.templates.matmul", "bmm": "trial.templates.matmul", "conv": "trial.templates.conv2d"}
TENSOR_CORE = "trial.templates.tensorcore"  # mm and bmm in the narrow types (trial/dtypes.py)


def load(wl: Workload, name: str | None = None) -> Any:
    """The template module for `wl` (by its op and element type), or the one `name` gives instead
    ("pkg.module" or "pkg.module:attr")."""
    module, _, attr = (name or (TENSOR_CORE if wl.element.mma_k else BY_OP[wl.op])).partition(":")
    found = importlib.import_module(module)
    return getattr(found, attr) if attr else found

"""Build stage: schedule the template with the knob values and compile for the target.

Every kernel of the suite compiles through `compile_module` (MetaSchedule's best schedules through it
and through TVM's own, benchmarks/metaschedule_child.py): TVM's default TIR pipeline with one fix.  TVM
0.27's LowerWarpMemory lowers only the first warp-scope buffer of a statement sequence; the tensor-core
template's A and B fragments come after the accumulators, so each thread kept the whole warp's fragments
in an array indexed by threadIdx.x, that is in local memory instead of registers.  The pass is repeated
until no warp buffer is left, which needs the warp's thread index visible in the fragment offsets: TVM's
TIR-level common-subexpression elimination, which hides it behind let-bound variables, is off (nvcc and
LLVM eliminate them anyway).
"""
from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx
from tvm.driver import build as runtime_build
from tvm.tirx import compilation_pipeline

from .target import Target
from .workload import Workload

PIPELINE = "opevo_suite"


@tvm.transform.module_pass(opt_level=0, name="LowerAllWarpMemory")
def _lower_all_warp_memory(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """LowerWarpMemory until it changes nothing: each application lowers one more warp buffer."""
    while True:
        lowered = tirx.transform.LowerWarpMemory()(mod)
        if tvm_ffi.structural_equal(lowered, mod):
            return lowered
        mod = lowered


def _pipeline() -> tuple[Any, Any, Any]:
    lower, finalize_host, _ = compilation_pipeline.get_tir_pipeline("s_tir")

    def finalize_device() -> tvm.transform.Pass:
        return tvm.transform.Sequential([_lower_all_warp_memory, tirx.transform.StmtSimplify(),
                                         tirx.transform.LowerIntrin()])

    return lower, finalize_host, finalize_device


compilation_pipeline.register_tir_pipeline(PIPELINE, _pipeline)


def pass_config(async_copy: bool = False) -> dict[str, Any]:
    """The PassContext settings of `compile_module`; `async_copy` lowers copies to cp.async (sm_80+)."""
    return {"tirx.use_async_copy": async_copy, "tirx.disable_cse_tir": True}


def compile_module(mod: tvm.IRModule, target: Any, async_copy: bool = False, runtime_module: bool = False) -> Any:
    """Compile a scheduled module for `target` (a tvm Target or its dict) through the suite's pipeline.

    Returns a tvm.runtime.Executable, or with `runtime_module` the runtime Module itself, which is what
    MetaSchedule's builder exports.
    """
    # in the target's scope, so that TVM's CUDA compile callback takes its arch from it instead of asking
    # the GPU (which opens a context, and fails in a process that sees no device: a build worker)
    with tvm.transform.PassContext(config=pass_config(async_copy)), tvm.target.Target(target):
        if runtime_module:
            return runtime_build(mod, target=target, pipeline=PIPELINE)
        return tvm.compile(mod, target=target, tir_pipeline=PIPELINE)


def build(wl: Workload, template: Any, params: dict[str, Any], target: Target) -> Any:
    """Schedule and compile to a tvm.runtime.Executable; TVM errors propagate (compile errors).

    Asynchronous copies are lowered only where the target has them; schedules that ask for none are
    unaffected by the setting.  A template with its own `compile_kernel` (wgmma.py: TIRx) compiles itself.
    """
    mod = template.schedule(wl, params, target)
    own = getattr(template, "compile_kernel", None)
    return own(mod, target) if own else compile_module(mod, target.target, target.async_copy)

"""What a GPU kernel does with memory, read from the TensorIR that CUDA code generation receives, and the
valid configs whose kernels the tests lower.

`device_module` runs the passes `tvm.compile` runs (the same target, pipeline and PassContext as
trial/build.py) and stops before code generation, so the tests see every vector access and
asynchronous copy of the generated CUDA as an index expression that TVM's arithmetic can reason about.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

import tvm
import tvm.sym
import tvm_ffi
from tvm.tirx.build import split_host_device_mods

from searchspace import ConstrainedSpace, SearchSpace
from trial import build, templates
from trial.constraints import KernelRules
from trial.target import Target
from trial.workload import Workload


def valid_configs(wl: Workload, target: Target, count: int, seed: int = 0, template: Any = None) -> list[dict[str, Any]]:
    """The hand-picked GPU config of `template` (default: the portable one) and `count` samples of its
    constrained space on `target`."""
    template = template or templates.load(wl)
    space = ConstrainedSpace.of(SearchSpace.from_json(template.search_space(wl)), KernelRules(wl, template, target))
    rng = random.Random(seed)
    return [template.default_params(wl, True), *(space.sample(rng) for _ in range(count))]


@dataclass(frozen=True)
class VectorAccess:
    """One vector access: `lanes` elements from `buffer` at element offset `coeff * n + base` for some n."""

    buffer: str
    lanes: int
    coeff: int
    base: int

    @property
    def aligned(self) -> bool:
        """Whether every offset the kernel can use is a multiple of the vector width."""
        return self.coeff % self.lanes == 0 and self.base % self.lanes == 0


def device_module(mod: tvm.IRModule, target: Target) -> tvm.IRModule:
    """The device functions of the scheduled `mod` as CUDA code generation receives them."""
    tgt = tvm.target.Target(target.target).with_host("llvm")
    with tvm.transform.PassContext(config=build.pass_config(target.async_copy)):
        passes, _, finalize_device = tvm.tirx.get_tir_pipeline(build.PIPELINE)
        _, devices = split_host_device_mods(passes(tvm.tirx.transform.BindTarget(tgt)(mod)))
        return finalize_device()(next(iter(devices.values())))


def vector_accesses(mod: tvm.IRModule) -> list[VectorAccess]:
    """Every vector load and store (a Ramp index of stride 1) and every asynchronous copy wider than one
    element."""
    analyzer, found = tvm.sym.Analyzer(), []

    def offset(buffer: str, start, lanes: int) -> None:
        m = analyzer.modular_set(start)
        found.append(VectorAccess(buffer, lanes, int(m.coeff), int(m.base)))

    def access(node) -> None:  # a BufferStore, or a BufferLoad (a TensorLoad of its source buffer)
        index = node.indices[-1]  # a strided Ramp (matmul's transposing copy) is accessed element by element
        if isinstance(index, tvm.tirx.Ramp) and int(index.lanes) > 1 and analyzer.can_prove(index.stride == 1):
            offset((node.buffer if hasattr(node, "buffer") else node.source).name, index.base, int(index.lanes))

    def call(node) -> None:
        if node.op.name == "tirx.s_tir.cp_async_raw":  # (dst.data, dst offset, src.data, src offset, bytes)
            dst, dst_offset, src, src_offset, nbytes = node.args
            dst, src = dst.args[0], src.args[0]  # the buffers behind buffer_data()
            lanes = int(nbytes) // (tvm.DataType(dst.dtype).bits // 8)
            if lanes > 1:
                offset(dst.name, dst_offset, lanes)
                offset(src.name, src_offset, lanes)

    for func in mod.functions.values():
        tvm_ffi.structural_walk(func.body, [((tvm.ir.TensorLoad, tvm.tirx.BufferStore), access), (tvm.ir.Call, call)])
    return found


def _allocations(mod: tvm.IRModule, scope: str) -> list[int]:
    sizes = []

    def alloc(node) -> None:
        if node.buffer.scope() == scope:
            sizes.append(math.prod(int(n) for n in node.buffer.shape) * tvm.DataType(node.buffer.dtype).bits // 8)

    for func in mod.functions.values():
        tvm_ffi.structural_walk(func.body, [(tvm.tirx.AllocBuffer, alloc)])
    return sizes


def dynamic_shared_bytes(mod: tvm.IRModule) -> int:
    """Bytes of the kernels' merged dynamic shared buffer (0 if they use none)."""
    return max(_allocations(mod, "shared.dyn"), default=0)


def static_shared_bytes(mod: tvm.IRModule) -> int:
    """Bytes of the kernels' static shared buffers together."""
    return sum(_allocations(mod, "shared"))


def loads_reused_across_barriers(source: str) -> list[str]:
    """The vector values (`float4 v_ = *(float4*)(...)`) that CUDA source loads and uses again after a
    `__syncthreads()` in the same scope.

    TVM 0.27's CUDA code generation names each distinct vector load once per scope, so a kernel that
    reads the same shared address in two rounds separated by a barrier gets the first round's value the
    second time, as the kernel of MetaSchedule's bmm PNN float16 schedule in tests/data/ does.
    """
    found, lines = [], source.splitlines()
    for n, line in enumerate(lines):
        defined = re.match(r"\s*\w+ (v_\w*) = ", line)
        if not defined:
            continue
        name, depth, barrier = defined.group(1), 0, False
        for later in lines[n + 1:]:
            if re.match(rf"\s*\w+ {name} = ", later):  # defined anew: a new value
                break
            if "__syncthreads()" in later:
                barrier = True
            elif barrier and re.search(rf"\b{name}\b", later):
                found.append(name)
                break
            depth += later.count("{") - later.count("}")
            if depth < 0:  # its scope ended
                break
    return found

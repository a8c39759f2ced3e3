"""Kernels in: the model with each tuned operator replaced by its tuned kernel, where that is faster.

`apply` exports the model (trace.py), runs it once to read each node's plan and arguments, and for
each workload with a verified record on this device builds and loads its kernel (kernels.py), checks
it against torch's operator on that node's own arguments, and times both there (torch's op is the
vendor library: cuBLAS/cuDNN on a GPU, oneDNN/MKL on the CPU).  Where the kernel is faster, every
node of that workload calls it through a `Tuned` submodule; the rest stay torch's.  The whole model is
then timed too, and the untouched module kept where the changed graph is not faster, so applying never
makes an operator or the model slower, to the accuracy of the timing.  A changed model is an
fx.GraphModule, which torch.compile takes as it is (the kernel is the opaque custom op `opevo::kernel`).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from trial.records import Records

from . import kernels, ops, timing, trace
from .errors import ModelError
from .load import resolve_target
from .tasks import for_target

TOLERANCE = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 2e-2}
"""Largest difference from torch's result allowed, relative to the largest magnitude of torch's result,
per element type: the kernels sum in another order (and float16 ones in other tiles) than torch does."""


@dataclass(frozen=True)
class Choice:
    """What the tuned model does for one workload: which implementation runs, and the times that decided."""

    workload: str
    count: int
    use: str  # "tuned" or "vendor" (torch's own operator)
    why: str
    vendor_ms: float | None = None
    tuned_ms: float | None = None
    kernel: str | None = None  # the loaded kernel's id (kernels.load), where one was built
    timed: str | None = None  # how both were timed (timing.pair_ms): "CUDA graph" or "call by call ..."
    kernel_ms: float | None = None  # where torch's epilogue made the tuned side lose: the kernel without it
    epilogue: str = ""  # that epilogue (ops.Plan.epilogue)

    @property
    def speedup(self) -> float | None:
        return self.vendor_ms / self.tuned_ms if self.vendor_ms and self.tuned_ms else None


class Tuned(torch.nn.Module):
    """One graph node's operator, running the tuned kernel `kernel_id` (kernels.load) on each call whose
    tensors make its workload (any other call, e.g. with other strides, runs torch's operator)."""

    def __init__(self, op: Any, workload: str, kernel_id: str) -> None:
        super().__init__()
        self.op, self.workload, self.kernel_id = op, workload, kernel_id
        self._plan = ops.planner(op)  # the op's planner, looked up once
        self._kernel = torch.ops.opevo.kernel

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        # the guard: this call's tensors make the kernel's workload (a key compared, nothing parsed)
        p = self._plan(args, kwargs, check=False)
        if type(p) is ops.Plan and p.workload == self.workload:
            return p.finish(self._kernel(*p.operands, self.kernel_id))
        return self.op(*args, **kwargs)


def difference(got: Any, want: Any) -> float:
    """max |got - want| / max |want| over the tensors of two outputs of the same structure: the figure the
    tolerances bound (infinite where the structures or shapes differ)."""
    got_leaves, want_leaves = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    if len(got_leaves) != len(want_leaves) or not want_leaves:
        return float("inf")
    worst = 0.0
    for g, w in zip(got_leaves, want_leaves):
        if isinstance(w, torch.Tensor) and w.is_floating_point():
            if not isinstance(g, torch.Tensor) or g.shape != w.shape:
                return float("inf")
            scale = w.detach().abs().max().float().clamp_min(1e-30)
            off = float((g.detach().float() - w.detach().float()).abs().max() / scale)
            if math.isnan(off):  # a NaN where torch has a number (max() would pass it over)
                return float("inf")
            worst = max(worst, off)
        elif not (torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w):
            return float("inf")
    return worst


def _decide(workload: str, calls: list[trace.NodeCall], target: Any, kind: str, records: Records | None,
            min_run_time: float, force: bool) -> Choice:
    record = kernels.best(workload, target, records)
    if record is None:
        elsewhere = kernels.best(workload, None, records)
        why = (f"recorded on {elsewhere.device} only, not on this device ({target.device_name})" if elsewhere
               else "no verified record on this device")
        return Choice(workload, len(calls), "vendor", why)
    try:
        kernel_id = kernels.load(workload, kernels.build(workload, record.params, target, kind, records))
    except ModelError as err:
        return Choice(workload, len(calls), "vendor", str(err))
    first = calls[0]
    tuned = Tuned(first.target, workload, kernel_id)
    with torch.no_grad():
        want, got = first.target(*first.args, **first.kwargs), tuned(*first.args, **first.kwargs)
        off = difference(got, want)
        if not off <= TOLERANCE[want.dtype]:  # NaN too
            return Choice(workload, len(calls), "vendor", f"tuned result differs from torch's by {off:.1e}")
        vendor_ms, tuned_ms, timed = timing.pair_ms(lambda: first.target(*first.args, **first.kwargs),
                                                    lambda: tuned(*first.args, **first.kwargs), target.is_gpu,
                                                    min_run_time)
    if force:
        return Choice(workload, len(calls), "tuned", "forced", vendor_ms, tuned_ms, kernel_id, timed)
    if tuned_ms < vendor_ms:
        return Choice(workload, len(calls), "tuned", "faster", vendor_ms, tuned_ms, kernel_id, timed)
    return Choice(workload, len(calls), "vendor", "the vendor's is faster", vendor_ms, tuned_ms, kernel_id, timed,
                  *_without_epilogue(first, kernel_id, timed, min_run_time))


def _without_epilogue(call: trace.NodeCall, kernel_id: str, timed: str, min_run_time: float) -> tuple[float | None, str]:
    """Where the tuned side of `call` lost and carries torch's epilogue (a bias the vendor fuses), the
    kernel's own time on the traced call's operands (its plan), timed as the pair was, and the epilogue;
    (None, "") where it carries none."""
    p = call.plan
    if not p.epilogue:
        return None, ""
    with torch.no_grad():
        return timing.like_ms(lambda: torch.ops.opevo.kernel(*p.operands, kernel_id), timed, min_run_time), p.epilogue


def _replace(gm: torch.fx.GraphModule, node: torch.fx.Node, choice: Choice) -> None:
    sub = f"opevo_{node.name}"
    gm.add_submodule(sub, Tuned(node.target, choice.workload, choice.kernel))
    with gm.graph.inserting_before(node):
        new = gm.graph.call_module(sub, node.args, node.kwargs)
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    gm.graph.erase_node(node)


def apply(module: torch.nn.Module, example_inputs: tuple[Any, ...], target: str = "auto",
          records: Records | None = None, min_run_time: float = timing.MIN_RUN_S,
          force: bool = False, traced: trace.Recorder | None = None) -> torch.nn.Module:
    """`module` with each tuned operator replaced by its tuned kernel where that is faster than torch's: an
    fx.GraphModule, or `module` itself where that is as fast end to end (`_faster_whole`).

    `example_inputs` are on the target's device (llvm: the CPU; cuda/rocm: torch's "cuda").  The result's
    `opevo_choices` lists per workload what runs and why, and `opevo_kept` which model was kept and why (the
    report prints both).  `records`: the store
    (default $OPEVO_RECORDS); `force`: every kernel that has a record and matches torch's result runs, faster
    or not (to check the kernels themselves); `traced`: a Recorder (tasks.profile's, keeping arguments) that
    already ran this module's exported graph on these inputs: its graph is the one changed, not exported again.
    """
    found = resolve_target(target)
    device = "cuda" if found.is_gpu else "cpu"
    if any(isinstance(x, torch.Tensor) and x.device.type != device for x in torch.utils._pytree.tree_leaves(example_inputs)):
        raise ModelError(f"the example inputs must be on the target's device ({device} for {found.label})")
    if traced is None:
        traced = trace.Recorder(trace.export(module, tuple(example_inputs)))
        trace.run(traced, tuple(example_inputs), found.device_name)
    elif not traced.keep_args:
        raise ValueError("apply needs a Recorder that kept the arguments (keep_args=True) to time the kernels")
    gm, recorder = traced.module, traced
    by_workload: dict[str, list[trace.NodeCall]] = defaultdict(list)
    for call in recorder.calls.values():
        p = for_target(call.plan, ops.op_name(call.target), found.is_gpu)
        if isinstance(p, ops.Plan):
            by_workload[p.workload].append(call)
    choices, nodes = [], {n.name: n for n in gm.graph.nodes}
    for workload, calls in by_workload.items():
        choice = _decide(workload, calls, found, target, records, min_run_time, force)
        choices.append(choice)
        if choice.use == "tuned":
            for call in calls:
                _replace(gm, nodes[call.name], choice)
    gm.recompile()
    for call in recorder.calls.values():  # the arguments held for timing are no longer needed
        call.args, call.kwargs = (), {}
    kept, why = (gm, "forced") if force else _faster_whole(module, gm, tuple(example_inputs), choices,
                                                          found.is_gpu, min_run_time)
    kept.opevo_choices, kept.opevo_kept = tuple(choices), why
    return kept


def _faster_whole(module: torch.nn.Module, gm: torch.fx.GraphModule, inputs: tuple[Any, ...],
                  choices: list[Choice], gpu: bool, min_run_time: float) -> tuple[torch.nn.Module, str]:
    """The faster of the untouched module and the exported graph with its tuned kernels, end to end, with why.

    Each kernel runs only where it beat torch's operator, but the exported graph calls ATen ops one by one
    and checks its inputs on each call, which costs Python time that the untouched module does not pay
    where calls are launched one by one (the CPU); on a GPU both are timed from CUDA graphs, where it
    vanishes.  So the model is timed whole as well, and where the graph is not faster the module itself
    is returned: applying never makes the model slower, to the accuracy of the timing.
    """
    if not any(c.use == "tuned" for c in choices):
        return module, "no tuned kernel is faster than torch's operator: the untouched model"
    untouched = timing.model_latency(module, inputs, gpu, min_run_time)
    tuned = timing.model_latency(gm, inputs, gpu, min_run_time)
    figures = f"{tuned.ms:.4f} ms with the tuned kernels against {untouched.ms:.4f} ms untouched ({untouched.how})"
    if tuned.ms < untouched.ms:
        return gm, f"the graph with the tuned kernels: {figures}"
    return module, f"the untouched model, as the faster: {figures}"

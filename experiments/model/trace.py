"""Trace a model with torch.export and run its graph node by node, each node under its own profiler range.

The graph is torch.export's ATen graph before decompositions, where a linear, a matmul and a conv2d
are still one node each (after decomposition a linear on a 3-D input becomes an expand, a bmm and
views, and scaled-dot-product attention its math).  Running the graph module with an fx
Interpreter that wraps each node in `record_function("opevo::<node>")` attributes every profiler
event, kernels included (the profiler links a GPU kernel to the range that launched it), to the one
node that caused it; nothing is matched by op name or shape, so two nodes of the same op and shapes
are never confused and no event is lost.
"""
from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from . import ops
from .errors import ModelError, out_of_memory, too_large

RANGE = "opevo::"


def _failing_line(err: BaseException) -> str:
    """The model's own source line nearest to where tracing failed, if the traceback shows one."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if "/torch/" not in f.filename and "/experiments/model/" not in f.filename]
    text = str(err)
    found = re.search(r'File "([^"]+)", line (\d+)', text)
    if frames:
        return f" at {frames[-1].filename}:{frames[-1].lineno} ({frames[-1].line})"
    return f" at {found.group(1)}:{found.group(2)}" if found else ""


def export(module: torch.nn.Module, inputs: tuple[Any, ...]) -> torch.fx.GraphModule:
    """The model's exported ATen graph as a runnable GraphModule; ModelError says where tracing failed."""
    try:
        with torch.no_grad():
            program = torch.export.export(module, tuple(inputs))
    except Exception as err:  # torch.export raises many kinds (UserError, Unsupported, TorchRuntimeError...)
        if out_of_memory(err):
            raise too_large("the model", str(next(module.parameters(), torch.empty(0)).device), err) from None
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise ModelError(f"torch.export cannot trace the model{_failing_line(err)}: {type(err).__name__}: "
                         f"{lines[0][:300]}") from err
    return program.module()


@dataclass
class NodeCall:
    """What one node of the graph does: its name, op, plan (or why not tunable) and its first call's args."""

    name: str
    target: Any
    plan: ops.Plan | ops.NotTunable
    args: tuple[Any, ...] = field(repr=False)
    kwargs: dict[str, Any] = field(repr=False)


class Recorder(torch.fx.Interpreter):
    """Runs the graph, each call_function node in its own profiler range; the first run records each node's
    plan (`calls`) and, with `keep_args`, the arguments of each workload's first node, for checking and
    timing that operator alone."""

    def __init__(self, gm: torch.fx.GraphModule, keep_args: bool = True) -> None:
        super().__init__(gm)
        self.calls: dict[str, NodeCall] = {}
        self.keep_args = keep_args
        self._kept: set[str] = set()  # workloads whose first node's arguments are kept

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if n.name not in self.calls:
            p = ops.plan(n.target, args, kwargs)
            keep = self.keep_args and isinstance(p, ops.Plan) and p.workload not in self._kept
            if keep:
                self._kept.add(p.workload)
            self.calls[n.name] = NodeCall(n.name, n.target, p, args if keep else (), kwargs if keep else {})
        with torch.profiler.record_function(RANGE + n.name):
            return n.target(*args, **kwargs)


def run(recorder: Recorder, inputs: tuple[Any, ...], device: str) -> Any:
    """One run of the graph; ModelError where it does not fit on the device."""
    flat = torch.utils._pytree.tree_leaves(inputs)
    try:
        with torch.no_grad():
            return recorder.run(*flat)
    except Exception as err:
        if out_of_memory(err):
            raise too_large("the model", device, err) from None
        raise

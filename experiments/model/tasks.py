"""Tasks out: the model's tunable operators, each a suite workload with its count and share of the time.

The time is the PyTorch profiler's on the target's device: GPU kernel time on a GPU, CPU op time on
llvm, attributed to graph nodes by their profiler ranges (trace.py) and averaged over a few runs
after a warm-up.  The model's time is the sum over its nodes, so the shares add up to one; the
operators the suite cannot tune are listed by op with their share and reasons, never dropped.
"""
from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from trial.workload import parse_name

from . import ops, timing, trace
from .load import Model

RUNS = 5


@dataclass(frozen=True)
class Task:
    """One workload the suite can tune: how often one run of the model calls it and its share of the time."""

    workload: str  # the suite's op/spec key, e.g. mm/N2048K768M3072PNT_f16
    count: int
    time_ms: float  # all its calls in one run of the model
    share: float  # of the model's time


@dataclass(frozen=True)
class Untunable:
    """The operators of one op the suite cannot tune, with why (each distinct reason once)."""

    op: str
    reasons: tuple[str, ...]
    count: int
    time_ms: float
    share: float


@dataclass(frozen=True)
class TaskList:
    model: str
    target: str
    device: str
    dtype: str
    total_ms: float
    tasks: tuple[Task, ...]
    untunable: tuple[Untunable, ...]
    timed_by: str = "PyTorch profiler"

    @property
    def tunable_share(self) -> float:
        return sum(t.share for t in self.tasks)

    def as_json(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "device": self.device, "dtype": self.dtype,
                "total_ms": self.total_ms, "timed_by": self.timed_by, "tunable_share": self.tunable_share,
                "tasks": [asdict(t) for t in self.tasks],
                "untunable": [{**asdict(u), "reasons": list(u.reasons)} for u in self.untunable]}

    def write(self, path: Path, made_by: dict[str, Any] | None = None) -> None:
        """Write the list as JSON; `made_by`: the command's options that made it (tune reuses a list of the
        same options rather than profiling the model again)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**self.as_json(), **({"made_by": made_by} if made_by else {})}, indent=1) + "\n")


def read(path: Path) -> list[Task]:
    """The tunable tasks of a tasks.json."""
    return [Task(**t) for t in json.loads(Path(path).read_text())["tasks"]]


def made_by(path: Path) -> dict[str, Any] | None:
    """The options that made the tasks.json at `path` (TaskList.write), or None: none there, unreadable or
    written without them."""
    try:
        found = json.loads(Path(path).read_text()).get("made_by")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


def for_target(p: ops.Plan | ops.NotTunable, op: str, gpu: bool) -> ops.Plan | ops.NotTunable:
    """`p`, unless its kernel needs what the target lacks (tensor-core types need a CUDA GPU)."""
    if isinstance(p, ops.Plan) and parse_name(p.workload).element.mma_k and not gpu:
        return ops.NotTunable(op, f"{parse_name(p.workload).dtype}: the suite's kernels for it need CUDA tensor cores")
    return p


def node_times(model: Model, recorder: trace.Recorder, runs: int = RUNS) -> dict[str, float]:
    """Milliseconds per run of each node, from the profiler's ranges."""
    gpu = model.target.is_gpu
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    dev = str(model.device)
    strict = timing.tf32(False) if gpu and model.dtype == "float32" else contextlib.nullcontext()
    with strict:  # float32 as the suite's kernels compute it: no TF32 products in cuBLAS or cuDNN
        trace.run(recorder, model.inputs, model.target.device_name)  # warm-up; records the plans
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(runs):
                trace.run(recorder, model.inputs, model.target.device_name)
            if gpu:
                torch.cuda.synchronize(dev)
    times: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.name.startswith(trace.RANGE) and event.device_type == torch.autograd.DeviceType.CPU:
            total = event.device_time_total if gpu else event.cpu_time_total
            times[event.name.removeprefix(trace.RANGE)] += total / 1e3 / runs
    return times


def find(model: Model, runs: int = RUNS) -> TaskList:
    """Trace, profile and sort the model's operators into tasks and the rest."""
    return profile(model, runs, keep_args=False)[0]


def profile(model: Model, runs: int = RUNS, keep_args: bool = True) -> tuple[TaskList, trace.Recorder]:
    """`find`'s task list, with the recorder that ran the exported graph: with `keep_args`, apply takes it as
    it is (apply's `traced`), so a report exports and runs the model once for both."""
    gm = trace.export(model.module, model.inputs)
    recorder = trace.Recorder(gm, keep_args=keep_args)
    times = node_times(model, recorder, runs)
    total = sum(times.values()) or 1.0
    tasks: dict[str, list[float]] = defaultdict(list)
    rest: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for name, call in recorder.calls.items():
        p = for_target(call.plan, ops.op_name(call.target), model.target.is_gpu)
        if isinstance(p, ops.Plan):
            tasks[p.workload].append(times.get(name, 0.0))
        else:
            rest[p.op].append((p.reason, times.get(name, 0.0)))
    found = sorted((Task(w, len(ts), sum(ts), sum(ts) / total) for w, ts in tasks.items()), key=lambda t: -t.time_ms)
    others = sorted((Untunable(op, tuple(dict.fromkeys(r for r, _ in calls)), len(calls), sum(t for _, t in calls),
                               sum(t for _, t in calls) / total) for op, calls in rest.items()), key=lambda u: -u.time_ms)
    return TaskList(model.name, model.target.label, model.target.device_name, model.dtype, total,
                    tuple(found), tuple(others)), recorder


def table(found: TaskList) -> str:
    """The task list as the command prints it."""
    time_kind = "GPU kernel time" if found.target.split()[0] in ("cuda", "rocm") else "CPU op time"
    lines = [f"{found.model} ({found.dtype}) on {found.device}: {found.total_ms:.3f} ms a run ({time_kind}, "
             f"{found.timed_by})", "", f"{'task':<44} {'count':>5} {'ms':>9} {'share':>7}"]
    lines += [f"{t.workload:<44} {t.count:>5} {t.time_ms:>9.3f} {t.share:>7.1%}" for t in found.tasks]
    lines += ["", f"{'not tunable (op)':<44} {'count':>5} {'ms':>9} {'share':>7}  why"]
    lines += [f"{u.op:<44} {u.count:>5} {u.time_ms:>9.3f} {u.share:>7.1%}  {'; '.join(u.reasons)}"
              for u in found.untunable]
    lines += ["", f"tunable: {len(found.tasks)} tasks, {found.tunable_share:.1%} of the model's time"]
    return "\n".join(lines)

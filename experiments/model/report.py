"""Report: per task what the tuned kernel gains, the tuned model's output, and end-to-end latencies.

Sections: (1) per task its count, torch's time, the tuned kernel's, the speed-up, its share of the
model and which one the tuned model runs; (2) the tuned model's output against the untouched model's
on the example inputs, with the tolerance of the dtype (apply.TOLERANCE); (3) the model's latency in
four forms: eager, the tuned model, torch.compile and the tuned model under torch.compile, the compile
rows last (max-autotune takes minutes on a large model).  On a GPU each is the replay of one CUDA
graph captured here, so all four are timed alike: torch.compile runs in mode
"max-autotune-no-cudagraphs" (max-autotune's kernel autotuning, with the graph captured here rather
than by Inductor); float32 runs with TF32 off (strict FP32, as the suite's float32 kernels compute),
and one more row gives eager with PyTorch's default of TF32 convolutions; cuDNN times its algorithms
(`cudnn.benchmark`) in every row and in the per-task figures, so the vendor is on its fastest path.
On the CPU they are timed call by call and torch.compile runs in its default mode (max-autotune tunes
GPU kernels; on the CPU it only adds compile time).

`compile=False` skips the torch.compile rows (they need a C++ compiler and minutes on a small CPU), and
the report says so; a compile that fails, or that Ctrl-C interrupts, is said in its row and the rest of
the report stands.  Each line is said (`say`) as soon as it is measured.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from trial.records import Records

from . import tasks, timing
from .apply import TOLERANCE, Choice, apply, difference
from .load import Model


@dataclass(frozen=True)
class Report:
    text: str
    output_ok: bool
    data: dict[str, Any]  # the same figures for a program: tasks, output check, latencies (report.json)


def _ms(value: float | None) -> str:
    return f"{value:9.4f}" if value is not None else f"{'-':>9}"


def _task_rows(found: tasks.TaskList, choices: dict[str, Choice]) -> list[str]:
    lines = ["vendor: torch's own operator on this device (cuBLAS/cuDNN on a GPU, oneDNN/MKL on the CPU)",
             f"{'task':<40} {'count':>5} {'vendor ms':>9} {'tuned ms':>9} {'speed-up':>8} {'share':>7}  runs",
             *(_task_row(t, choices.get(t.workload)) for t in found.tasks)]
    lines.append(f"tunable share of the model: {found.tunable_share:.1%}; the rest: "
                 + (", ".join(f"{u.op} {u.share:.1%}" for u in found.untunable[:6]) or "nothing")
                 + (", ..." if len(found.untunable) > 6 else ""))
    return lines


def _task_row(t: tasks.Task, c: Choice | None) -> str:
    if c is None:
        return f"{t.workload:<40} {t.count:>5} {_ms(None)} {_ms(None)} {'-':>8} {t.share:>7.1%}  vendor"
    speedup = f"{c.speedup:7.2f}x" if c.speedup else f"{'-':>8}"
    alone = f"; the kernel alone {c.kernel_ms:.4f} ms, before torch adds the {c.epilogue}" if c.kernel_ms else ""
    return (f"{t.workload:<40} {t.count:>5} {_ms(c.vendor_ms)} {_ms(c.tuned_ms)} {speedup} {t.share:>7.1%}  "
            f"{c.use} ({c.why}{alone}{f'; both timed {c.timed}' if c.timed else ''})")


def _row(name: str, lat: timing.Latency, base_ms: float | None) -> str:
    ratio = f"{base_ms / lat.ms:7.2f}x" if base_ms and lat.ms else f"{'':>8}"
    return f"{name:<48} {_ms(lat.ms)} {ratio}  {lat.how}"


def _compiled_rows(model: Model, tuned: torch.nn.Module, row: Callable[[str, timing.Latency], None],
                   say: Callable[[str], None]) -> None:
    """The torch.compile rows (`row` says and keeps each).  Inductor's failure on a model is that row's
    result, and Ctrl-C while it compiles leaves the compile rows out: the rest of the report stands."""
    gpu = model.target.is_gpu
    mode = "max-autotune-no-cudagraphs" if gpu else None
    label = f"(mode {mode or 'default'})"
    slow = "max-autotune times every kernel's choices, minutes on a large model; " if gpu else ""
    say(f"(torch.compile {label} compiling: {slow}Ctrl-C leaves these rows out)")
    for name, module in ((f"torch.compile {label}", model.module), (f"tuned, torch.compile {label}", tuned)):
        try:
            lat = timing.model_latency(torch.compile(module, mode=mode), model.inputs, gpu)
        except KeyboardInterrupt:
            say("torch.compile rows interrupted (Ctrl-C): left out")
            return
        except Exception as err:  # noqa: BLE001 - Inductor's failure is this row's result, not the report's
            first = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
            lat = timing.Latency(None, f"failed: {type(err).__name__}: {first}")
        row(name, lat)
    if not gpu:
        say("on the CPU torch.compile runs in its default mode: max-autotune tunes GPU kernels")


def report(model: Model, records: Records | None = None, compile: bool = True,
           say: Callable[[str], None] = lambda line: None) -> Report:
    """Profile, apply the tuned kernels and compare; the text has every section, whatever was skipped,
    and `say` gets each line as soon as it is known (the torch.compile rows, the slowest, come last)."""
    gpu, strict = model.target.is_gpu, model.dtype == "float32"
    lines: list[str] = []
    data: dict[str, Any] = {"model": model.name, "dtype": model.dtype, "device": model.target.device_name,
                            "target": model.target.label, "latency": {}}

    def out(*new: str) -> None:
        for line in new:
            lines.append(line)
            say(line)

    def row(name: str, lat: timing.Latency, vs_eager: bool = True, label: str | None = None) -> None:
        data["latency"][name] = {"ms": lat.ms, "timed": lat.how}
        out(_row(label or name, lat, data["latency"]["eager"]["ms"] if vs_eager else None))

    out(f"{model.name} ({model.dtype}) on {model.target.device_name} ({model.target.label})"
        + (", TF32 off (strict FP32)" if gpu and strict else "")
        + (", cuDNN's algorithms timed (cudnn.benchmark on)" if gpu else ""), "")
    with contextlib.ExitStack() as on_gpu:
        if gpu:
            on_gpu.enter_context(timing.tf32(not strict))
            on_gpu.enter_context(timing.cudnn_benchmark())
        found, traced = tasks.profile(model)  # the export and run that apply then takes as they are
        tuned = apply(model.module, model.inputs, target=model.target.kind, records=records, traced=traced)
        choices = {c.workload: c for c in tuned.opevo_choices}
        used = sum(c.use == "tuned" for c in choices.values())
        data["tasks"] = [{"workload": t.workload, "count": t.count, "share": t.share,
                          **(asdict(choices[t.workload]) if t.workload in choices else {"use": "vendor"})}
                         for t in found.tasks]
        data["untunable"] = [{"op": u.op, "share": u.share} for u in found.untunable]
        data["kept"] = tuned.opevo_kept
        out(f"Tasks: {len(found.tasks)}, a tuned kernel is faster for {used}", *_task_rows(found, choices),
            f"the tuned model: {tuned.opevo_kept}", "")
        with torch.no_grad():
            want, got = model.module(*model.inputs), tuned(*model.inputs)
        off, tolerance = difference(got, want), TOLERANCE[getattr(torch, model.dtype)]
        ok = off <= tolerance
        data["output"] = {"difference": off, "tolerance": tolerance, "ok": ok}
        out("Output: tuned model against the untouched one on the example inputs",
            f"max |tuned - torch| / max |torch| = {off:.2e}, tolerance {tolerance:.0e} ({model.dtype}): "
            + ("ok" if ok else "MISMATCH"), "")
        out("End-to-end latency", f"{'model':<48} {'ms':>9} {'vs eager':>8}  timed")
        row("eager", timing.model_latency(model.module, model.inputs, gpu))
        same = " (= untouched: no kernel kept)" if tuned is model.module else ""
        row("tuned", timing.model_latency(tuned, model.inputs, gpu), label=f"tuned{same}")
        if gpu and strict:
            with timing.tf32(True):
                row("eager with TF32 (PyTorch default in convs)",
                    timing.model_latency(model.module, model.inputs, gpu), vs_eager=False)
        if compile:
            _compiled_rows(model, tuned, row, out)
        else:
            out("torch.compile rows skipped (--no-compile)")
    return Report("\n".join(lines), ok, data)

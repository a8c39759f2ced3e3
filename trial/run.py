"""Run stage: execute a built kernel once on a device, check its output, then time it."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
import tvm_ffi

from . import graphs, verify
from .workload import Workload


PROBE_CALLS = 3
LOOP_S = 2e-3
"""About how long the loop of calls lasts that sizes TVM's timer (`calls_per_repeat`)."""
MARGIN = 1.1
"""A timed repeat's calls are sized to fill this much of `min_repeat_ms`, so that it is not run again."""


@dataclass
class Timing:
    median_s: float
    std_s: float
    repeats: list[float]
    method: str = "launch"  # "graph": replayed from a CUDA graph (graphs.py); "launch": call by call
    parts: dict[str, float] = field(default_factory=dict)  # seconds of the run's steps (`run`)

    def metrics(self, wl: Workload) -> dict[str, Any]:
        """The figures a measurement reports."""
        return {"gflops": wl.flops / self.median_s / 1e9, "latency_ms": self.median_s * 1e3,
                "latency_std_ms": self.std_s * 1e3,
                "extra": {"repeats_ms": [r * 1e3 for r in self.repeats], "timing": self.method,
                          "run_s": self.parts}}


def _unwritten(dtype: str) -> float | int:
    """What the output holds before the kernel runs: a value no correct result takes (NaN, or int32's
    minimum, beyond the sums that verify.int8_bound allows)."""
    return np.iinfo(dtype).min if np.dtype(dtype).kind == "i" else np.nan


def unwritten_output(wl: Workload) -> np.ndarray:
    """The output as a kernel finds it: every element `_unwritten`, so one that a kernel skips is caught."""
    return np.full(wl.output_shape, _unwritten(wl.out_dtype), dtype=wl.out_dtype)


class WrongResult(RuntimeError):
    """The kernel ran but its output does not match the reference."""


def run(mod: Any, dev: tvm.runtime.Device, reference: verify.Reference, repeat: int, min_repeat_ms: int,
        args: list[Any] | None = None, algorithm: str = "direct", out: Any | None = None,
        sample: Callable[[Any], np.ndarray] | None = None) -> Timing:
    """Run once on the reference's inputs and check the output, then time with `repeat` repeats of >=
    `min_repeat_ms` each: on a local CUDA GPU from a CUDA graph (graphs.py), elsewhere (or where the
    graph fails, the reason kept in `Timing.method`) call by call with TVM's `time_evaluator`.

    `mod` is a runtime module with the kernel as "main": a fresh build's `.mod` or an exported library
    loaded with `tvm.runtime.load_module`.  The reference is computed beforehand, so that the device lock is
    held for device work only.  `args`: the reference's inputs already on `dev` (trial/service/kept.py keeps
    them), else they are copied there now; `out`, likewise, a fresh `unwritten_output` there; `sample`, what reads
    the checked outputs from it (`Reference.check_sampled`), else the whole output is read.  `algorithm`:
    how the kernel computes, which sets how closely its output must match (`verify.Reference.tolerance_of`).
    `Timing.parts`: the seconds of its steps: "tensors" (inputs and output on the device), "check" (the
    first call and the output's check) and "timing" (the repeats, with what sizes them).
    """
    wl = reference.wl
    clock = [time.perf_counter()]
    parts: dict[str, float] = {}

    def done(part: str) -> None:
        clock.append(time.perf_counter())
        parts[part] = clock[-1] - clock[-2]

    args = args or [tvm.runtime.tensor(x, dev) for x in reference.inputs]
    out = out if out is not None else tvm.runtime.tensor(unwritten_output(wl), dev)
    done("tensors")
    mod["main"](*args, out)
    dev.sync()
    sampled = sample(out) if sample else out.numpy()[reference.idx]
    problem = reference.check_sampled(sampled, algorithm)
    if problem:
        raise WrongResult(problem)
    done("check")
    # TVM's timer finds how many calls fill `min_repeat_ms` by running a repeat again with 1.6x the calls
    # whenever it falls short; a few single calls size the CUDA graph (graphs.py), or the loop of calls that
    # sizes TVM's timer (`calls_per_repeat`), for less of the device's time
    single = min(mod.time_evaluator("main", dev, number=1, repeat=PROBE_CALLS)(*args, out).results)
    method = "launch"
    if dev.dlpack_device_type() == tvm_ffi.DLDeviceType.kDLCUDA:  # a local GPU (not one through RPC)
        kernel = mod["main"]
        try:
            repeats = graphs.time_calls(lambda: kernel(*args, out), dev, repeat, min_repeat_ms, single)
            done("timing")
            return Timing(float(np.median(repeats)), float(np.std(repeats)), repeats, "graph", parts)
        except graphs.GraphError as err:
            method = f"launch (no graph: {err})"
    number = calls_per_repeat(mod, dev, [*args, out], single, min_repeat_ms)
    timer = mod.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    result = timer(*args, out)
    repeats = [float(r) for r in result.results]
    done("timing")
    return Timing(float(np.median(repeats)), float(np.std(repeats)), repeats, method, parts)


def calls_per_repeat(mod: Any, dev: tvm.runtime.Device, args: list[Any], single_s: float, min_repeat_ms: int) -> int:
    """How many calls of `mod` fill a timed repeat of `min_repeat_ms` (with MARGIN), from a loop of about
    LOOP_S of them.  A call timed alone (`single_s`) also counts its launch and the device's start, which
    the calls of a loop overlap on a GPU: a count sized on it falls short of `min_repeat_ms`, and TVM's
    timer then runs the repeat again with more calls, spending the device's time twice."""
    loop = max(1, math.ceil(LOOP_S / max(single_s, 1e-9)))
    per_call = mod.time_evaluator("main", dev, number=loop, repeat=1)(*args).results[0]
    return max(1, math.ceil(MARGIN * min_repeat_ms / 1e3 / max(per_call, 1e-9)))

"""Run stage: execute a built kernel once on a device, check its output, then time it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

from . import verify
from .workload import Workload


@dataclass
class Timing:
    median_s: float
    std_s: float
    repeats: list[float]


class WrongResult(RuntimeError):
    """The kernel ran but its output does not match the reference."""


def run(wl: Workload, mod: Any, dev: tvm.runtime.Device, repeat: int, min_repeat_ms: int,
        seed: int = 0) -> Timing:
    """Warm up and verify with seeded inputs, then time with `repeat` repeats of >= `min_repeat_ms` each.

    `mod` is a runtime module with the kernel as "main": a fresh build's `.mod` or an exported
    library loaded with `tvm.runtime.load_module`.
    """
    inputs = verify.make_inputs(wl, seed)
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.full(wl.output_shape, np.nan, dtype=wl.dtype), dev)
    mod["main"](*args, out)
    dev.sync()
    problem = verify.check(wl, inputs, out.numpy(), seed)
    if problem:
        raise WrongResult(problem)
    timer = mod.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    result = timer(*args, out)
    repeats = [float(r) for r in result.results]
    return Timing(float(np.median(repeats)), float(np.std(repeats)), repeats)

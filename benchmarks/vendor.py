"""Vendor-library baselines through PyTorch: cuBLAS (mm, bmm) and cuDNN (conv), FP32 with TF32 off.

PyTorch is not a dependency of the suite; these baselines run where it is installed (GPU machines).
The benchmarks call `baseline`, which times the library only where that makes sense and under the
device lock, with the run's repeat settings.
"""
from __future__ import annotations

import statistics
from typing import Any

from trial import devicelock
from trial.measure import Options
from trial.workload import Workload


def baseline(wl: Workload, target: Any, repeat: int = Options.repeat,
             min_repeat_ms: float = Options.min_repeat_ms) -> dict[str, Any] | None:
    """The vendor library on `wl` (`time_vendor`) under the CUDA device lock, or None where it has no figure.

    `target` is where the kernels ran: a target kind or a measurement's target string ("cuda sm_90"),
    or an object with a `kind`.  None unless that is CUDA, PyTorch is installed and sees a CUDA device.
    """
    kind = getattr(target, "kind", target) or ""
    if not str(kind).startswith("cuda"):
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    with devicelock.acquire("cuda", 1):
        return time_vendor(wl, repeat, min_repeat_ms)


def time_vendor(wl: Workload, repeat: int = Options.repeat,
                min_repeat_ms: float = Options.min_repeat_ms) -> dict[str, Any]:
    """Median latency (ms) and GFLOPS of the vendor library on `wl`, on the current CUDA device."""
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # let cuDNN pick its fastest algorithm, as a user would
    dev = torch.device("cuda")
    a, b = (torch.rand(s, device=dev, dtype=torch.float32) * 2 - 1 for s in wl.input_shapes)
    if wl.op == "conv":
        d = wl.dims
        fn = lambda: F.conv2d(a, b, stride=d["ST"], padding=d["PD"])  # noqa: E731
        name = "cuDNN"
    else:
        x = a.transpose(-1, -2) if wl.layout[0] == "T" else a
        y = b.transpose(-1, -2) if wl.layout[1] == "T" else b
        fn = (lambda: torch.bmm(x, y)) if wl.op == "bmm" else (lambda: torch.mm(x, y))
        name = "cuBLAS"
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    number = max(1, int(min_repeat_ms / max(start.elapsed_time(end), 1e-3)))
    times = []
    for _ in range(repeat):
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / number)
    ms = statistics.median(times)
    return {"library": name, "latency_ms": ms, "gflops": wl.flops / ms / 1e6}

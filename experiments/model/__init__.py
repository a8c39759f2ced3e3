"""Whole-model tuning: a PyTorch (or ONNX) model in, its tunable operators out as tasks, the tuned kernels
back in.

    load.py     MODEL -> module and example inputs on the target's device
    trace.py    torch.export's graph, run node by node under profiler ranges
    ops.py      an ATen call -> the suite workload it is, or why it is none
    tasks.py    the tasks, their counts and shares of the model's time; tasks.json
    onnx_tasks.py  the same read from an ONNX graph's inferred shapes
    kernels.py  a recorded kernel built, loaded and called as the custom op opevo::kernel
    apply.py    the model with its tuned operators replaced, where faster than torch's
    timing.py   operator and end-to-end timing
    report.py   per task and end-to-end comparison, output check
    tune.py     spends a trial budget across the tasks as NNI experiments

torch is a dependency of this package (pip install 'opevo-suite[model]').
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as err:
    raise ImportError("experiments.model needs torch: pip install 'opevo-suite[model]'") from err

from .apply import apply  # noqa: E402  (the function; the module stays experiments.model.apply in sys.modules)
from .tasks import Task  # noqa: E402

__all__ = ["apply", "Task"]

"""Vendor-library baselines through PyTorch: cuBLAS (mm, bmm) and cuDNN (conv) in the workload's type and
layout (FP32 with TF32 off; TF32 with it on; float16, bfloat16, int8 and float8 e4m3 on tensor cores), on
the suite's own seeded inputs, its output checked against the same float64 reference as the suite's
kernels (trial/verify.py): a figure of a library that computes something else would compare nothing.

PyTorch is not a dependency of the suite; these baselines run where it is installed (GPU machines).
`baseline` times the library only where that makes sense and under the device lock, with a measurement's
repeat settings: the benchmarks and `make tune`'s summary (experiments/summary.py) call it;
`python -m benchmarks.vendor` is its command line.
"""
from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from . import devicelock, winograd
from .measure import Options
from .verify import Reference
from .workload import Workload

GRAPH_CALLS = 100
"""Calls captured in one graph; a timed repeat replays it until it lasts `min_repeat_ms` (as the suite's
kernels are timed: trial/graphs.py, which captures through the CUDA driver rather than PyTorch)."""

BENCHMARK_LIMIT = 0
"""`torch.backends.cudnn.benchmark_limit` while cuDNN is timed: 0 times every engine configuration, cuDNN's
fastest documented path, where PyTorch's default of 10 can miss it (docs/benchmarks.md)."""

CUDNN_SEARCHES = 5
"""cuDNN algorithm searches a convolution's figure is the fastest of: PyTorch's search times each engine
configuration by one run (cudnn_frontend's CUDNN_FIND_SAMPLE_ONCE), so where a call lasts tens of µs its
pick varies from one search to the next (docs/benchmarks.md).  PyTorch keeps its picks per thread, so each
search runs in a thread of its own (`fastest_search`)."""


@contextmanager
def cudnn_search(torch: Any, benchmark: bool = True) -> Iterator[None]:
    """cuDNN picks each convolution's algorithm, for the block, by timing every engine configuration
    (`cudnn.benchmark` with `BENCHMARK_LIMIT`) or, with `benchmark` False, by its heuristics; the process's
    settings are given back."""
    cudnn = torch.backends.cudnn
    saved = cudnn.benchmark, cudnn.benchmark_limit
    cudnn.benchmark, cudnn.benchmark_limit = benchmark, BENCHMARK_LIMIT
    try:
        yield
    finally:
        cudnn.benchmark, cudnn.benchmark_limit = saved


def baseline(wl: Workload, target: Any, repeat: int = Options.repeat, min_repeat_ms: float = Options.min_repeat_ms,
             cudnn_benchmark: bool = True, compile_mode: str | None = None) -> dict[str, Any] | None:
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
        return time_vendor(wl, repeat, min_repeat_ms, cudnn_benchmark, compile_mode)


def time_vendor(wl: Workload, repeat: int = Options.repeat, min_repeat_ms: float = Options.min_repeat_ms,
                cudnn_benchmark: bool = True, compile_mode: str | None = None) -> dict[str, Any] | None:
    """Median latency (ms) and GFLOPS of the vendor library on `wl`, on the current CUDA device, and "check":
    None where its output passed the float64 reference (`check`), else what differs (its "library" says so
    too); None where the library has no kernel for it (`library_call`).

    cuDNN picks its algorithm by timing them all (`cudnn_benchmark`, as a user tuning for speed would) or,
    with False, by its heuristics (PyTorch's default): `cudnn_search`.  Timing them, it searches
    `CUDNN_SEARCHES` times and the figure is of its fastest pick (`fastest_search`).

    With `compile_mode` the same call goes through `torch.compile` in that mode first, as a PyTorch user
    gets it ("compile_s": its compilation and autotuning, under the lock, before the timing; a convolution's
    compiled call is timed after as many cuDNN searches as the library's): in
    "max-autotune-no-cudagraphs" Inductor times its Triton templates against the ATen kernels (cuBLAS,
    cuDNN) and keeps the fastest, as "max-autotune" does, without Inductor's CUDA graphs, since the call is
    replayed from a CUDA graph here anyway.  Inductor's templates follow the TF32 setting below.

    The calls are replayed from a CUDA graph: launched one by one from Python, each costs the CPU more
    (PyTorch's dispatch, ~15 us on an H100 machine) than a small GEMM takes on the GPU, so the GPU waited
    between calls and the library read up to 4x slow (docs/benchmarks.md, "How the vendor is timed"),
    lower still while tuning loaded the CPU.
    The suite's kernels are replayed from a CUDA graph too (trial/graphs.py).  Where a call cannot be
    captured, it is timed eagerly, and "timing" says so.
    """
    import torch

    cuda, cudnn = torch.backends.cuda, torch.backends.cudnn
    saved = cuda.matmul.allow_tf32, cudnn.allow_tf32
    cuda.matmul.allow_tf32 = cudnn.allow_tf32 = bool(wl.element.input_bits)
    try:  # the process's settings are given back: make tune's summary times the vendor in its own process
        with cudnn_search(torch, cudnn_benchmark):
            return _timed(wl, torch, repeat, min_repeat_ms, cudnn_benchmark, compile_mode)
    finally:
        cuda.matmul.allow_tf32, cudnn.allow_tf32 = saved


def _timed(wl: Workload, torch: Any, repeat: int, min_repeat_ms: float, cudnn_benchmark: bool,
           compile_mode: str | None) -> dict[str, Any] | None:
    found = library_call(wl, torch)
    if found is None:
        return None
    name, fn = found
    if wl.op == "conv" and not cudnn_benchmark:
        name += ", heuristic algorithm (cudnn.benchmark off)"
    extra: dict[str, Any] = {}
    if compile_mode:
        torch._dynamo.reset()  # every workload's call is one code object: Dynamo's recompile limit would count them
        start = time.perf_counter()
        fn = torch.compile(fn, mode=compile_mode, fullgraph=True, dynamic=False)
        fn()
        torch.cuda.synchronize()
        name, extra = f"torch.compile {compile_mode} of {name}", {"compile_s": time.perf_counter() - start}
    if wl.op == "conv" and cudnn_benchmark:  # the compiled call's cuDNN convolution searches per thread too
        return {**fastest_search(torch, lambda: time_call(wl, torch, name, fn, repeat, min_repeat_ms)), **extra}
    return {**time_call(wl, torch, name, fn, repeat, min_repeat_ms), **extra}


def fastest_search(torch: Any, timed: Callable[[], dict[str, Any]], searches: int = CUDNN_SEARCHES) -> dict[str, Any]:
    """`timed` (a `time_call` of a convolution) run `searches` times, each in a new thread on the caller's CUDA
    device, so that cuDNN searches for its algorithm anew each time: the fastest run, with every run's
    latency ("searches", ms)."""
    device = torch.cuda.current_device()

    def search() -> dict[str, Any]:
        with torch.cuda.device(device):
            return timed()

    found = []
    for _ in range(searches):
        with ThreadPoolExecutor(max_workers=1) as thread:  # a new thread: PyTorch's per-thread picks start empty
            found.append(thread.submit(search).result())
    return {**min(found, key=lambda f: f["latency_ms"]), "searches": [f["latency_ms"] for f in found]}


def time_call(wl: Workload, torch: Any, name: str, fn: Callable[[], Any], repeat: int,
              min_repeat_ms: float) -> dict[str, Any]:
    """Time `fn` (a call on `wl`'s operands, returning its output) as the vendor is timed, from a CUDA graph
    where it can be captured, and check its output: {"library": `name`, "latency_ms", "gflops", "timing",
    "check"} (`time_vendor`)."""
    side = torch.cuda.Stream()  # warm-up (cuDNN's algorithm search, cuBLAS's workspace) off the capture stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    one = _elapsed_ms(torch, fn)
    calls = max(1, min(GRAPH_CALLS, int(min_repeat_ms / max(one, 1e-3))))
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        run, timing = graph.replay, "CUDA graph"
    except RuntimeError:  # not capturable: time the calls as launched
        run, timing = (lambda: [fn() for _ in range(calls)]), "eager"
    run()
    replays = max(1, int(min_repeat_ms / max(_elapsed_ms(torch, run), 1e-3)))
    ms = statistics.median(_elapsed_ms(torch, run, replays) / calls for _ in range(repeat))
    wrong = check(wl, fn())
    if wrong:  # every table that shows the figure shows this with it
        name += ", its output differs from the float64 reference"
    return {"library": name, "latency_ms": ms, "gflops": wl.flops / ms / 1e6, "timing": timing, "check": wrong}


def check(wl: Workload, output: Any) -> str | None:
    """None where the library's `output` (a torch tensor, of `library_call`'s operands) matches the float64
    reference of `wl` within the tolerance the suite's kernels get, else what differs.  A convolution that
    cuDNN may compute by Winograd's transforms (stride 1, a kernel trial/winograd.py has a tile for) passes
    with their rounding too, as the suite's Winograd kernels do."""
    got = (output.float() if output.is_floating_point() else output).cpu().numpy()
    reference = reference_of(wl)
    wrong = reference.check(got)
    if wrong and wl.op == "conv" and wl.layout == "NCHW" and wl.dims["ST"] == 1 and wl.dims["K"] in winograd.TILE:
        return reference.check(got, "winograd") and wrong
    return wrong


def _elapsed_ms(torch: Any, run: Callable[[], Any], times: int = 1) -> float:
    """GPU milliseconds of `times` runs of `run`, between two CUDA events, per run."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(times):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / times


@functools.lru_cache(maxsize=1)
def reference_of(wl: Workload) -> Reference:
    """`wl`'s seeded inputs and float64 reference, made once for the operands and the check of a call (the
    study's 11x11 convolution's inputs are 316 MB)."""
    return Reference.of(wl)


def operands(wl: Workload, torch: Any, device: str = "cuda") -> list[Any]:
    """`wl`'s inputs as the suite's kernels get them (`reference_of`: verify.make_inputs, seeded), as torch
    tensors on `device` in `wl`'s type and stored layout: the reference knows what the library's output
    must be."""
    e = wl.element
    found = []
    for x in reference_of(wl).inputs:
        t = torch.from_numpy(x if e.is_integer else x.astype("float32")).to(device)
        found.append(t if e.is_integer else t.to(getattr(torch, e.tvm)))
    return found


def library_call(wl: Workload, torch: Any, device: str = "cuda") -> tuple[str, Callable[[], Any]] | None:
    """The library's name (with the type) and a call of it on `wl`'s operands (`operands`), returning its
    output, or None.

    float32, float16 and bfloat16: torch.mm / torch.bmm (the 16-bit types write their own type); int8:
    torch._int_mm (int32 out); float8 e4m3: torch._scaled_mm with unit scales (float32 out).  Both 8-bit
    calls get B column-major, copied to that layout once, outside the timing: cuBLASLt's float8 kernel
    takes no other, and its int8 kernels run several times faster on it than on a row-major B (its fast
    path, as `torch._int_mm` users lay B out).  Neither 8-bit call has a batched form.  Convolutions: cuDNN
    through `F.conv2d`, NCHW in float32, channels_last (the NHWC tensors as they are) in the other types.
    """
    import torch.nn.functional as F

    e = wl.element
    if e.itemsize == 1 and wl.op == "bmm":
        return None
    dev = torch.device(device)
    a, b = operands(wl, torch, device)
    if wl.op == "conv":
        d = wl.dims
        if wl.layout == "NHWC":  # channels_last: NCHW views of the NHWC tensors, the output's NHWC again
            x, w = a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2)
            name = "cuDNN TF32 (allow_tf32 on)" if e.input_bits else f"cuDNN {e.name}"
            return (f"{name}, NHWC (channels_last)",
                    lambda: F.conv2d(x, w, stride=d["ST"], padding=d["PD"]).permute(0, 2, 3, 1))
        return "cuDNN FP32 (TF32 off)", lambda: F.conv2d(a, b, stride=d["ST"], padding=d["PD"])
    x = a.transpose(-1, -2) if wl.layout[0] == "T" else a
    y = b.transpose(-1, -2) if wl.layout[1] == "T" else b
    if e.itemsize == 1:
        y = y.t().contiguous().t()
    if e.is_integer:
        return "cuBLASLt int8 (torch._int_mm, B column-major)", lambda: torch._int_mm(x, y)
    if e.itemsize == 1:
        one = torch.ones((), device=dev)
        return ("cuBLASLt float8 e4m3 (torch._scaled_mm, B column-major)",
                lambda: torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.float32))
    name = ("cuBLAS TF32 (allow_tf32 on)" if e.input_bits else f"cuBLAS {e.name}" if e.mma_k
            else "cuBLAS FP32 (TF32 off)")
    return name, (lambda: torch.bmm(x, y)) if wl.op == "bmm" else (lambda: torch.mm(x, y))

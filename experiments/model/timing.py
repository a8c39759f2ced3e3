"""Timing of torch callables: one operator, or a whole model, on the CPU or a GPU.

torch.utils.benchmark's Timer repeats a call until `min_run_time` is filled and synchronizes CUDA
around its measurements; its median is the figure.  On a GPU a whole model is timed as a CUDA graph
replay (captured on a side stream after a warm-up), so launch overheads that a deployment would not
pay are left out; a model that cannot be captured is timed call by call, and the
result says so.  Two implementations of one operator (torch's and a tuned kernel) are timed alike,
both from CUDA graphs or both call by call, never one of each (`pair_ms`).  While cuDNN searches for its
convolutions' algorithms, what torch runs is timed as the vendor baselines are: the fastest of several
timings, each in a thread of its own, where cuDNN searches anew (`searched_ms`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.benchmark as benchmark

from trial.vendor import cudnn_search, fastest_search

MIN_RUN_S = 0.2


@contextmanager
def tf32(allowed: bool) -> Iterator[None]:
    """cuBLAS's and cuDNN's TF32 products allowed or not, for the block.  A float32 model is profiled and
    timed with them off (strict FP32, as the suite's float32 kernels compute); PyTorch's default allows
    them in convolutions, which the report shows in a row of its own."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def cudnn_benchmark() -> AbstractContextManager[None]:
    """cuDNN picks each convolution's algorithm by timing every engine configuration, for the block, as the
    vendor baselines have it (`trial.vendor.cudnn_search`): the vendor's fastest path, which the report times
    every model with (PyTorch's default picks by heuristics)."""
    return cudnn_search(torch)


def median_ms(fn: Callable[[], Any], min_run_time: float = MIN_RUN_S) -> float:
    """The median time of one call of `fn`, in milliseconds."""
    fn()  # warm-up: first calls allocate, pick algorithms, compile
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn})
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def searched_ms(fn: Callable[[], Any], gpu: bool, graphed: bool, min_run_time: float = MIN_RUN_S) -> float:
    """The median time of one call of `fn` (replayed from a CUDA graph captured for it, where `graphed`), in
    milliseconds.  On a GPU with `cudnn.benchmark` on, the fastest of as many timings as the vendor baselines
    take (`trial.vendor.fastest_search`): cuDNN's search is one timing of each algorithm, which can pick a
    slower one, and it keeps its pick per thread, so each timing runs in a new thread (with the caller's grad
    mode, which PyTorch also keeps per thread) and searches anew."""

    def timed() -> dict[str, float]:
        return {"latency_ms": median_ms(_graphed(fn) if graphed else fn, min_run_time)}

    if not (gpu and torch.backends.cudnn.benchmark):
        return timed()["latency_ms"]
    grad = torch.is_grad_enabled()

    def in_thread() -> dict[str, float]:
        with torch.set_grad_enabled(grad):
            return timed()

    return fastest_search(torch, in_thread)["latency_ms"]


def pair_ms(first: Callable[[], Any], second: Callable[[], Any], gpu: bool,
            min_run_time: float = MIN_RUN_S) -> tuple[float, float, str]:
    """Two implementations of one operator timed alike, and how: on a GPU both replayed from CUDA graphs, as
    the model runs in the report (Python's dispatch, which differs between torch's op and a tuned one, is
    then not counted); where either cannot be captured, both call by call, so the two figures compare.
    `first`, torch's, is timed as `searched_ms` times it; `second`, a tuned kernel, searches nothing."""
    if gpu:
        try:
            graphs = _graphed(first), _graphed(second)
        except RuntimeError as err:  # not capturable: both timed as they are
            how = f"call by call (no CUDA graph: {str(err).splitlines()[0][:80] if str(err) else type(err).__name__})"
        else:
            return searched_ms(first, gpu, True, min_run_time), median_ms(graphs[1], min_run_time), "CUDA graph"
    else:
        how = "call by call"
    return searched_ms(first, gpu, False, min_run_time), median_ms(second, min_run_time), how


def like_ms(fn: Callable[[], Any], how: str, min_run_time: float = MIN_RUN_S) -> float:
    """`fn` timed as `pair_ms` timed a pair (`how` is its answer): from a CUDA graph or call by call."""
    return median_ms(_graphed(fn) if how == "CUDA graph" else fn, min_run_time)


@dataclass(frozen=True)
class Latency:
    ms: float | None
    how: str  # "CUDA graph", "call by call", or why it was not measured


def _graphed(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` captured in a CUDA graph; its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def model_latency(module: Callable[..., Any], inputs: tuple[Any, ...], gpu: bool,
                  min_run_time: float = MIN_RUN_S) -> Latency:
    """End-to-end latency of `module(*inputs)`: from a CUDA graph on a GPU (call by call, saying why, where
    the model cannot be captured), call by call on the CPU; timed as `searched_ms` times."""

    def call() -> Any:
        with torch.no_grad():
            return module(*inputs)

    if gpu:
        try:
            with torch.no_grad():
                return Latency(searched_ms(call, gpu, True, min_run_time), "CUDA graph")
        except RuntimeError as err:
            how = f"call by call (no CUDA graph: {str(err).splitlines()[0][:80]})"
            return Latency(searched_ms(call, gpu, False, min_run_time), how)
    return Latency(median_ms(call, min_run_time), "call by call")

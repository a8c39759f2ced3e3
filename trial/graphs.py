"""Time a kernel from a CUDA graph: its calls captured once, the graph replayed between two events.

A call through TVM's runtime costs the CPU 5 to 7 us on an H100 machine (the host function, tensor-map
encoding, the launch), longer than many tensor-core kernels take: timed call by call (`time_evaluator`),
the GPU waits between calls and the figure is the CPU's.  The vendor library is timed from a graph
(benchmarks/vendor.py); our kernels are timed the same way, so a ratio compares kernels, not launchers.

TVM launches on the FFI environment's stream of the device (`tvm_ffi.use_raw_stream`), so its calls
are captured on a stream of our own.  The graph API is the CUDA driver's (libcuda, present wherever an
NVIDIA driver is), reached through ctypes: no CUDA toolkit or PyTorch is needed where trials run.
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import tvm_ffi

GRAPH_CALLS = 100
"""Calls captured in one graph at most: a repeat replays it until it lasts `min_repeat_ms`."""
CAPTURE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED: TVM's host code may query the device while capturing
STREAM_NON_BLOCKING = 1


class GraphError(RuntimeError):
    """The calls could not be captured or replayed (the caller times them call by call instead)."""


class Driver:
    """The few CUDA driver calls a graph timing needs, each raising GraphError with the driver's error name."""

    def __init__(self, library: str = "libcuda.so.1") -> None:
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as err:
            raise GraphError(f"no CUDA driver library: {err}") from err

    def __getattr__(self, name: str) -> Callable[..., None]:
        function = getattr(self._lib, name)

        def call(*args: Any) -> None:
            code = function(*args)
            if code:
                text = ctypes.c_char_p()
                self._lib.cuGetErrorName(code, ctypes.byref(text))
                raise GraphError(f"{name}: {(text.value or b'error').decode()} ({code})")
        return call


@contextmanager
def _handle(create: Callable[[Any], None], destroy: Callable[[Any], None]) -> Iterator[ctypes.c_void_p]:
    handle = ctypes.c_void_p()
    create(ctypes.byref(handle))
    try:
        yield handle
    finally:
        destroy(handle)


def time_calls(call: Callable[[], Any], device: Any, repeat: int, min_repeat_ms: float, single_s: float,
               driver: Driver | None = None) -> list[float]:
    """Seconds per call of `call` (a kernel launch on `device`, a CUDA device), one figure per repeat.

    `single_s` (one call, timed from the CPU) sizes the graph; a first replay times it, and each repeat
    then replays it as often as fills `min_repeat_ms`.  Raises GraphError where capture or replay fails.
    """
    cu = driver or Driver()
    calls = max(1, min(GRAPH_CALLS, math.ceil(min_repeat_ms / 1e3 / max(single_s, 1e-9))))
    with ExitStack() as stack:
        stream = stack.enter_context(_handle(lambda h: cu.cuStreamCreate(h, STREAM_NON_BLOCKING),
                                             cu.cuStreamDestroy_v2))
        start, end = (stack.enter_context(_handle(lambda h: cu.cuEventCreate(h, 0), cu.cuEventDestroy_v2))
                      for _ in range(2))
        graph = ctypes.c_void_p()
        with tvm_ffi.use_raw_stream(device, stream.value):
            call()  # anything a first call loads or allocates, outside the capture
            cu.cuStreamSynchronize(stream)
            cu.cuStreamBeginCapture_v2(stream, CAPTURE_RELAXED)
            try:
                for _ in range(calls):
                    call()
            except Exception as err:  # e.g. a launch the capture does not support
                raise GraphError(f"capturing the calls: {err}") from err
            finally:
                cu.cuStreamEndCapture(stream, ctypes.byref(graph))
                if graph.value:
                    stack.callback(cu.cuGraphDestroy, graph)
        replay = stack.enter_context(_handle(lambda h: cu.cuGraphInstantiateWithFlags(h, graph, ctypes.c_ulonglong(0)),
                                             cu.cuGraphExecDestroy))

        def elapsed_s(replays: int) -> float:
            cu.cuEventRecord(start, stream)
            for _ in range(replays):
                cu.cuGraphLaunch(replay, stream)
            cu.cuEventRecord(end, stream)
            cu.cuEventSynchronize(end)
            ms = ctypes.c_float()
            cu.cuEventElapsedTime(ctypes.byref(ms), start, end)
            return ms.value / 1e3

        elapsed_s(1)  # the first replay uploads the graph
        once = elapsed_s(1)
        if once <= 0:
            raise GraphError("a replay of the graph took no time")
        replays = max(1, math.ceil(min_repeat_ms / 1e3 / once))
        return [elapsed_s(replays) / (replays * calls) for _ in range(repeat)]

"""Timing from a CUDA graph (trial/graphs.py), against a stand-in for the CUDA driver: what is captured on
which stream, how often the graph is replayed, that every handle is released, and that failures become
GraphError (the run stage then times call by call).  The real driver is exercised by the GPU check."""
import ctypes
import math

import pytest
import tvm_ffi

from trial import graphs

CUDA = tvm_ffi.device("cuda:0")
KERNEL_S = 2e-6  # what one captured call takes on the stand-in GPU


class FakeDriver:
    """Records the driver calls; a replay of the graph takes its captured calls times KERNEL_S."""

    def __init__(self, fail: str | None = None):
        self.fail, self.log, self.live, self.next_handle = fail, [], set(), 100
        self.captured, self.capturing, self.pending_s, self.timing = 0, False, 0.0, False

    def _new(self, pointer):
        self.next_handle += 1
        pointer._obj.value = self.next_handle
        self.live.add(self.next_handle)

    def _free(self, handle):
        self.live.remove(handle.value)

    def __getattr__(self, name):
        def call(*args):
            self.log.append(name)
            if name == self.fail:
                raise graphs.GraphError(f"{name}: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)")
            if name in ("cuStreamCreate", "cuEventCreate", "cuGraphInstantiateWithFlags"):
                self._new(args[0])
            elif name in ("cuStreamDestroy_v2", "cuEventDestroy_v2", "cuGraphDestroy", "cuGraphExecDestroy"):
                self._free(args[0])
            elif name == "cuStreamBeginCapture_v2":
                assert args[1] == graphs.CAPTURE_RELAXED
                self.capturing = True
            elif name == "cuStreamEndCapture":
                self.capturing = False
                self._new(args[1])
            elif name == "cuEventRecord" and not self.timing:  # the start event (the end one stops the clock)
                self.pending_s = 0.0
            elif name == "cuGraphLaunch":
                self.pending_s += self.captured * KERNEL_S
            elif name == "cuEventElapsedTime":
                args[0]._obj.value = self.pending_s * 1e3
            if name == "cuEventRecord":
                self.timing = not self.timing
        return call


def test_calls_are_captured_on_a_stream_of_their_own_and_the_graph_replayed_for_min_repeat_ms():
    driver, streams = FakeDriver(), []

    def kernel():
        streams.append(tvm_ffi.get_raw_stream(CUDA))
        driver.captured += driver.capturing

    per_call = graphs.time_calls(kernel, CUDA, repeat=3, min_repeat_ms=40, single_s=6e-6, driver=driver)
    assert per_call == pytest.approx([KERNEL_S] * 3)
    calls = graphs.GRAPH_CALLS  # 40 ms of 6 us calls is more than a graph holds
    assert driver.captured == calls and len(streams) == 1 + calls  # one call before capturing
    assert set(streams) == {101} and tvm_ffi.get_raw_stream(CUDA) != 101  # our stream, then the previous one
    replays, left = divmod(driver.log.count("cuGraphLaunch") - 2, 3)  # an upload, an estimate, three repeats
    assert left == 0 and (replays - 1) * calls * KERNEL_S < 40e-3 <= replays * calls * KERNEL_S * (1 + 1e-9)
    assert not driver.live  # stream, both events, the graph and its executable released


def test_a_slow_kernel_is_captured_fewer_times():
    driver = FakeDriver()

    def kernel():
        driver.captured += driver.capturing

    graphs.time_calls(kernel, CUDA, repeat=1, min_repeat_ms=40, single_s=15e-3, driver=driver)
    assert driver.captured == math.ceil(40 / 15)


@pytest.mark.parametrize("fail", ["cuStreamBeginCapture_v2", "cuGraphInstantiateWithFlags", "cuEventSynchronize"])
def test_a_failing_driver_call_is_a_graph_error_and_releases_what_was_made(fail):
    driver = FakeDriver(fail=fail)
    with pytest.raises(graphs.GraphError, match=f"{fail}: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"):
        graphs.time_calls(lambda: None, CUDA, repeat=1, min_repeat_ms=1, single_s=1e-5, driver=driver)
    assert not driver.live


def test_a_call_that_fails_while_capturing_ends_the_capture():
    driver = FakeDriver()

    def kernel():
        if driver.capturing:
            raise RuntimeError("CUDA: operation not permitted when stream is capturing")

    with pytest.raises(graphs.GraphError, match="capturing the calls: CUDA: operation not permitted"):
        graphs.time_calls(kernel, CUDA, repeat=1, min_repeat_ms=1, single_s=1e-5, driver=driver)
    assert "cuStreamEndCapture" in driver.log and not driver.live


def test_without_a_cuda_driver_there_is_no_graph():
    with pytest.raises(graphs.GraphError, match="no CUDA driver library"):
        graphs.Driver("libcuda-absent.so.1")


def test_driver_errors_carry_the_drivers_name_for_them():
    """Any shared library answers through the same wrapper: a nonzero result is an error, named by
    cuGetErrorName (here a stand-in library object)."""

    class Library:
        @staticmethod
        def cuStreamSynchronize(stream):
            return 700

        @staticmethod
        def cuGetErrorName(code, name):
            name._obj.value = b"CUDA_ERROR_ILLEGAL_ADDRESS"
            return 0

    driver = graphs.Driver.__new__(graphs.Driver)
    driver._lib = Library()
    with pytest.raises(graphs.GraphError, match=r"cuStreamSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS \(700\)"):
        driver.cuStreamSynchronize(ctypes.c_void_p(1))

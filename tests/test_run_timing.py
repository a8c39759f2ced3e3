"""How TVM's timer is sized where a kernel is timed call by call (the CPU, ROCm, a GPU through RPC)."""
import math

from trial import run
from trial.measure import Options, measure
from trial.workload import parse


class LaunchedKernel:
    """A module whose kernel takes `kernel_s` on the device, after `start_s` of launch and device start that
    a loop of calls pays once (a GPU's launches overlap the kernels before them)."""

    def __init__(self, kernel_s, start_s):
        self.kernel_s, self.start_s, self.timers = kernel_s, start_s, []

    def time_evaluator(self, name, dev, number=1, repeat=1, min_repeat_ms=0):
        self.timers.append((number, repeat, min_repeat_ms))
        per_call = (self.start_s + number * self.kernel_s) / number
        return lambda *args: type("Result", (), {"results": [per_call] * repeat})()


def test_a_repeat_is_sized_on_a_loop_of_calls_so_that_it_fills_min_repeat_ms_at_once():
    kernel = LaunchedKernel(kernel_s=27e-6, start_s=23e-6)  # alone, a call reads 50 us
    single = kernel.time_evaluator("main", None)().results[0]
    number = run.calls_per_repeat(kernel, None, [], single, min_repeat_ms=40)
    loop, repeats, _ = kernel.timers[-1]
    assert loop * single >= 0.8 * run.LOOP_S and repeats == 1  # one short loop of calls, about LOOP_S
    assert 40e-3 <= number * kernel.kernel_s <= run.MARGIN * 40e-3 * 1.05  # fills a repeat, not much more
    alone = math.ceil(run.MARGIN * 40e-3 / single)  # a count sized on the lone call
    assert number > alone and alone * kernel.kernel_s < 40e-3  # which would have fallen short


def test_a_kernel_longer_than_the_loop_is_called_once_to_size_the_timer():
    kernel = LaunchedKernel(kernel_s=5e-3, start_s=0.0)
    assert run.calls_per_repeat(kernel, None, [], 5e-3, min_repeat_ms=40) == 9  # 44 ms of 5 ms calls
    assert kernel.timers == [(1, 1, 0)]


def test_a_cpu_measurement_times_repeats_of_at_least_min_repeat_ms():
    result = measure(parse("mm", "N64K64M64"), None, Options(target="llvm", repeat=3, min_repeat_ms=5))
    assert result.status == "ok" and len(result.extra["repeats_ms"]) == 3
    assert result.extra["timing"] == "launch" and result.extra["run_s"]["timing"] >= 3 * 5e-3

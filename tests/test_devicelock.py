"""The CPU's lock: builds share the cores, a CPU timing has them to itself, and a waiting timing is not starved."""
import threading

from trial import devicelock
from trial.measure import Options, measure
from trial.workload import parse

FAST = Options(target="llvm", min_repeat_ms=1)

BLOCKED_S = 0.5  # how long a holder that must wait is watched still waiting


class Holder(threading.Thread):
    """Holds a lock (a context manager) from the moment it gets it until `release` is set; records when."""

    def __init__(self, name, lock, log):
        super().__init__(daemon=True)
        self.lock, self.log, self.tag = lock, log, name
        self.held, self.release = threading.Event(), threading.Event()

    def run(self):
        with self.lock:
            self.log.append(self.tag)
            self.held.set()
            self.release.wait(30)

    def done(self):
        self.release.set()
        self.join(30)


def start(name, lock, log):
    holder = Holder(name, lock, log)
    holder.start()
    return holder


def test_builds_share_the_cpu():
    log = []
    builds = [start(f"build{i}", devicelock.cores(exclusive=False), log) for i in range(3)]
    assert all(b.held.wait(5) for b in builds)
    for b in builds:
        b.done()


def test_a_cpu_timing_waits_for_builds_and_holds_new_ones_back():
    log = []
    build = start("build", devicelock.cores(exclusive=False), log)
    assert build.held.wait(5)
    timing = start("timing", devicelock.hold("llvm", 0, 1), log)
    assert not timing.held.wait(BLOCKED_S)  # the build under way ends first
    later = start("later build", devicelock.cores(exclusive=False), log)
    assert not later.held.wait(BLOCKED_S)  # queued behind the waiting timing, though the CPU is only shared
    build.done()
    assert timing.held.wait(5)
    assert not later.held.wait(BLOCKED_S)  # no build while the kernel is timed
    timing.done()
    assert later.held.wait(5)
    later.done()
    assert log == ["build", "timing", "later build"]


def test_cpu_timings_exclude_each_other_and_metaschedules():
    """The service's runner (`hold`) and MetaSchedule's (`acquire`) time one kernel at a time."""
    log = []
    first = start("runner", devicelock.hold("llvm", 0, 1), log)
    assert first.held.wait(5)
    second = start("metaschedule", devicelock.acquire("llvm", 1), log)
    assert not second.held.wait(BLOCKED_S)
    first.done()
    assert second.held.wait(5)
    second.done()
    assert log == ["runner", "metaschedule"]


def test_a_gpu_timing_does_not_wait_for_builds():
    log = []
    build = start("build", devicelock.cores(exclusive=False), log)
    assert build.held.wait(5)
    timing = start("gpu timing", devicelock.hold("cuda", 0, 1), log)
    assert timing.held.wait(5)
    timing.done()
    build.done()


def test_builds_wait_while_the_cpu_times_a_kernel_and_their_deadline_starts_after(private_service):
    """A CPU timing elsewhere (another service of this lock folder, MetaSchedule) holds the CPU: the build
    waits for it (setup), not the run (lock_wait), and a wait longer than the build timeout is no timeout."""
    assert measure(parse("mm", "N16K16M16"), None, FAST).status == "ok"  # the workers are up
    held, release = threading.Event(), threading.Event()

    def timing():
        with devicelock.hold("llvm", 0, 1):
            held.set()
            release.wait(30)

    threading.Thread(target=timing, daemon=True).start()
    assert held.wait(10)
    threading.Timer(3.0, release.set).start()
    waited = measure(parse("mm", "N16K16M32"), None, Options(**{**FAST.__dict__, "build_timeout_s": 1.5}))
    assert waited.status == "ok", waited.reason
    stages = waited.extra["stages"]
    assert stages["setup"] > 2.0 and stages["lock_wait"] < 1.0, stages

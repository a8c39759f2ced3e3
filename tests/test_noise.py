"""A timing says how far it can be trusted: the spread of its repeats and, on the CPU, how busy the machine was."""
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil

from trial import noise
from trial.measure import Options, measure
from trial.workload import parse


def loaded(share, cores=2):
    return SimpleNamespace(share=share, cores=cores)


def test_a_steady_timing_on_a_quiet_machine_has_no_warning():
    assert noise.warning(1.0, 0.02, loaded(0.01)) == ""
    assert noise.warning(1.0, 0.02, loaded(None)) == ""  # too short a window to tell
    assert noise.warning(None, None) == ""  # no timing


def test_widely_spread_repeats_and_a_busy_cpu_are_named():
    assert noise.warning(2.0, 0.3) == "noisy timing: the repeats' standard deviation is 15% of their median (over 5%)"
    assert noise.warning(1.0, 0.01, loaded(0.45)) == \
        "busy CPU: other processes used 0.9 of its 2 cores while the kernel was timed"
    both = noise.warning(1.0, 0.3, loaded(0.45))
    assert both.startswith("noisy timing") and "; busy CPU" in both


def test_only_other_processes_count_as_load(monkeypatch):
    """The system's CPU time less this process's own, over the wall time of all cores."""
    system = iter([SimpleNamespace(user=10.0, system=2.0, idle=50.0), SimpleNamespace(user=11.2, system=2.4, idle=50.4)])
    own = iter([SimpleNamespace(user=1.0, system=0.0), SimpleNamespace(user=1.5, system=0.1)])
    clock = iter([100.0, 101.0])
    monkeypatch.setattr(noise.psutil, "cpu_times", lambda: next(system))
    monkeypatch.setattr(noise.psutil, "cpu_count", lambda: 2)
    monkeypatch.setattr(noise.psutil, "Process", lambda: SimpleNamespace(cpu_times=lambda: next(own)))
    monkeypatch.setattr(noise.time, "monotonic", lambda: next(clock))
    with noise.OthersLoad() as load:
        pass
    assert abs(load.share - (1.6 - 0.6) / 2) < 1e-9


def test_a_process_spinning_beside_a_cpu_timing_is_seen():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        with noise.OthersLoad() as load:
            time.sleep(0.6)
    finally:
        spinner.kill()
        spinner.wait()
    assert load.share is not None and load.share * load.cores > noise.BUSY_LIMIT * load.cores


def test_a_cpu_measurement_on_a_busy_machine_says_so():
    """End to end: the runner measures the load while it times, and the trial's result carries the warning."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(psutil.cpu_count() or 1)]
    try:
        result = measure(parse("mm", "N64K64M64"), None, Options(target="llvm", min_repeat_ms=50))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert result.status == "ok", result.reason
    assert "busy CPU: other processes used" in result.warning
    assert result.report()["warning"] == result.warning

"""The measuring service's runners: two a local GPU, which take turns on its lock, one for the CPU and one for
each server behind an RPC runner; and what a measurement says of the CPU its build and run cost."""
import json
import subprocess
import sys
import time

from trial import blasthreads
from trial.measure import Options, measure
from trial.service import pools
from trial.service.client import ROOT
from trial.service.worker import Worker
from trial.target import DeviceLimits, Target
from trial.workload import parse

H100S = Target("cuda", {"kind": "cuda", "arch": "sm_90"}, "NVIDIA H100", 2,
               DeviceLimits(1024, (1024, 1024, 64), 49152, 65536, 255, 32, 232448))


class DescribingWorker:
    """A runner worker that answers `describe` with `found` and records nothing else."""

    found = H100S

    def __init__(self, name, devices=True):
        self.name, self.alive = name, True

    def call(self, function, *args, **kwargs):
        assert function == "trial.service.runner:describe"
        return {"target": self.found.describe()}

    def stop(self):
        self.alive = False


def _runners(monkeypatch, found, where="local"):
    monkeypatch.setattr(pools, "Worker", DescribingWorker)
    monkeypatch.setattr(pools, "save", lambda *args: None)
    monkeypatch.setattr(DescribingWorker, "found", found)
    devices = pools.Devices()
    target = devices.target(found.kind, where)
    taken = []
    for _ in range(len(devices.all)):  # every runner once, in the order requests get them
        with devices.runner(target, where) as runner:
            taken.append(runner)
    return devices, taken


def test_each_local_gpu_has_two_runners_and_a_lone_request_gets_the_probed_one(monkeypatch):
    devices, taken = _runners(monkeypatch, H100S)
    assert [(r.index, r.worker.name) for r in devices.all] == [
        (0, "runner-cuda-0"), (1, "runner-cuda-1"), (0, "runner-cuda-0-1"), (1, "runner-cuda-1-1")]
    assert [r.index for r in taken] == [0, 1, 0, 1]  # both devices busy before either gets its second runner
    assert pools.runners_per_device(H100S, "local") == pools.RUNNERS_PER_GPU == 2


class StartedByACallWorker(DescribingWorker):
    """A runner worker that, like the real one, has no process until its first call; records the calls."""

    calls = []

    def __init__(self, name, devices=True):
        self.name, self.alive = name, False

    def call(self, function, *args, **kwargs):
        self.alive = True
        self.calls.append((self.name, function, args))
        return {"target": self.found.describe()} if function.endswith(":describe") else None


def test_every_local_gpu_runner_is_started_as_the_target_is_found(monkeypatch):
    """The first wave of an experiment's trials on N GPUs finds each runner's process and context up."""
    monkeypatch.setattr(StartedByACallWorker, "calls", [])
    monkeypatch.setattr(pools, "Worker", StartedByACallWorker)
    monkeypatch.setattr(pools, "save", lambda *args: None)
    monkeypatch.setattr(StartedByACallWorker, "found", H100S)
    devices = pools.Devices()
    target = devices.target("cuda")
    deadline = time.monotonic() + 10
    while len(StartedByACallWorker.calls) < len(devices.all) and time.monotonic() < deadline:
        time.sleep(0.01)
    warmed = sorted((name, args[1]) for name, function, args in StartedByACallWorker.calls
                    if function == "trial.service.runner:warm")
    assert warmed == [("runner-cuda-0-1", 0), ("runner-cuda-1", 1), ("runner-cuda-1-1", 1)]
    assert all(r.worker.alive for r in devices.all)
    with devices.runner(target) as runner:  # every runner is back in the queue
        assert runner.worker.alive


def test_the_cpu_and_each_rpc_server_have_one_runner(monkeypatch):
    cpu = Target("llvm", {"kind": "llvm"}, "x86_64", 1, None)
    assert [r.worker.name for r in _runners(monkeypatch, cpu)[0].all] == ["runner-llvm-0"]
    assert pools.runners_per_device(H100S, "rpc://127.0.0.1:9190/h100") == 1  # a server serves one session


def test_a_measurement_says_the_cpu_seconds_of_its_build_and_run_and_when_it_held_the_device(private_service):
    result = measure(parse("mm", "N16K16M16"), None, Options(target="llvm", min_repeat_ms=1))
    assert result.status == "ok", result.reason
    cpu = result.extra["cpu_s"]
    assert set(cpu) == {"build", "run"} and 0 < cpu["run"] and 0 < cpu["build"] < result.build_s * 8
    lock = result.extra["device_s"]  # when the runner took and gave back the device's lock
    assert lock["held"] < lock["released"] < lock["held"] + result.extra["stages"]["run"] + 1
    # verify-and-time's steps under the lock, timed by the runner (the marks above are the service's)
    steps = result.extra["run_s"]
    assert set(steps) == {"load", "tensors", "check", "timing"} and steps["timing"] > 0
    assert 0 < sum(steps.values()) < result.extra["stages"]["run"] + 1


def test_the_trial_and_the_workers_load_numpy_with_one_blas_thread(monkeypatch):
    """OpenBLAS starts a thread per core as numpy loads, at seconds of CPU a process on a many-core host; a
    trial and the service's workers load it with one, and leave the environment as they found it."""
    monkeypatch.delenv(blasthreads.VARIABLE, raising=False)
    probe = ("import json, os, threadpoolctl, trial.__main__; print(json.dumps([os.environ.get("
             "'OPENBLAS_NUM_THREADS'), [i['num_threads'] for i in threadpoolctl.threadpool_info() "
             "if i['user_api'] == 'blas']]))")
    assert json.loads(subprocess.check_output([sys.executable, "-c", probe], cwd=ROOT, text=True)) == [None, [1]]
    for worker in (Worker("blas-runner"), Worker("blas-build", devices=False)):
        try:
            blas = [i["num_threads"] for i in worker.call("threadpoolctl:threadpool_info") if i["user_api"] == "blas"]
            assert blas == [1] and worker.call("os:getenv", blasthreads.VARIABLE) is None
        finally:
            worker.stop()

"""The measuring service on the CPU: warm workers that survive what kernels and trials do to them.

Each test here has a service of its own (`private_service`), so it can kill, hang or stop it.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from trial.service import client, runner
from trial.service.pools import Builders
from trial.service.worker import DEVICE_VARIABLES, Worker
from trial.measure import Options, measure
from trial.records import Records
from trial.target import resolve
from trial.workload import parse

FAST = Options(target="llvm", min_repeat_ms=1)
WL = parse("mm", "N16K16M16")
TESTS = str(Path(__file__).parent)


def status():
    return client.request({"request": "status"}, start=False)


def wait_for(condition, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; the service: {status()}")


def faulty(name, **options):
    return Options(**{**FAST.__dict__, "template": f"faulty_templates:{name}", **options})


def test_workers_are_reused_and_only_kernels_wait_for_the_device(private_service):
    first = measure(WL, None, FAST)
    assert first.status == "ok", first.reason
    pids = status()["workers"]
    for _ in range(3):
        assert measure(WL, None, FAST).status == "ok"
    assert status()["workers"] == pids  # the same processes: no start-up per measurement
    again = measure(WL, None, FAST)
    assert set(again.extra["stages"]) == {"startup", "setup", "build", "lock_wait", "run", "exit"}
    assert again.extra["stages"]["startup"] < 1.0
    assert again.report()["timing"] == "launch"  # a CPU kernel is timed call by call (CUDA: from a graph)


def test_concurrent_trials_share_one_service(private_service):
    specs = ["N16K16M16", "N32K16M16", "N16K32M16", "N16K16M32", "N48K16M16", "N16K48M16"]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda spec: measure(parse("mm", spec), None, FAST), specs))
    assert [r.status for r in results] == ["ok"] * 6, [r.reason for r in results]
    assert status()["served"] == {"ok": 6}


def test_a_crashed_runner_is_replaced_and_the_next_trial_measures(private_service):
    crash = measure(WL, None, faulty("Crash"))
    assert crash.status == "runtime_error" and "killed by SIGABRT during run" in crash.reason
    after = measure(WL, None, FAST)
    assert after.status == "ok", after.reason


def test_a_hung_kernel_times_out_and_the_next_trial_measures(private_service):
    hung = measure(WL, None, faulty("Hang", run_timeout_s=3))
    assert hung.status == "timeout" and "kernel run exceeded 3 s" in hung.reason
    after = measure(WL, None, FAST)
    assert after.status == "ok", after.reason


def test_a_killed_trial_frees_the_device_at_once(private_service, monkeypatch):
    """A trial killed while its kernel hangs: the service gives the run up (it never answers anyone) and
    the next trial measures long before the hung run's own timeout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))  # one service
    trial = subprocess.Popen([sys.executable, "-m", "trial", "mm", WL.spec, "--target", "llvm", "--no-record",
                              "--template", "faulty_templates:Hang", "--run-timeout", "120"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (s := status()) and s["active"] >= 1 and any(n.startswith("runner") for n in s["workers"]),
                 60, "the hung trial to reach the device")
        time.sleep(1.0)
    finally:
        trial.kill()
        trial.wait()
    start = time.monotonic()
    after = measure(WL, None, FAST)
    assert after.status == "ok", after.reason
    assert time.monotonic() - start < 30


def test_a_killed_service_is_replaced_and_the_trial_gets_its_status(private_service):
    """The service dies mid-measurement: the trial's request goes to a new service, which answers it; the
    dead service's workers end by themselves."""
    measure(WL, None, FAST)
    old = status()
    answers = []
    slow = threading.Thread(target=lambda: answers.append(measure(WL, None, faulty("SlowBuild", build_timeout_s=4))))
    slow.start()
    wait_for(lambda: status()["active"] >= 1, 30, "the slow build to start")
    os.kill(old["pid"], signal.SIGKILL)
    slow.join(120)
    assert answers and answers[0].status == "timeout" and "build exceeded 4 s" in answers[0].reason
    assert status()["pid"] != old["pid"]
    wait_for(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                             for pid in old["workers"].values()), 15, "the old service's workers to exit")


def test_the_service_exits_when_idle_and_takes_its_workers(private_service, monkeypatch):
    monkeypatch.setenv(client.IDLE_ENV, "2")
    assert measure(WL, None, FAST).status == "ok"
    running = status()
    service = psutil.Process(running["pid"])
    service.wait(30)
    assert status() is None
    log = client.address().log.read_text()
    assert "stopped after serving {'ok': 1}" in log and "Traceback" not in log, log
    for pid in running["workers"].values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert measure(WL, None, FAST).status == "ok"  # the next measurement starts a new one


def test_stop_and_status_from_the_command_line(private_service):
    no_service = subprocess.run([sys.executable, "-m", "trial.service", "status"], capture_output=True, text=True)
    assert "no measuring service runs" in no_service.stdout
    assert measure(WL, None, FAST).status == "ok"
    pid = status()["pid"]
    stopped = subprocess.run([sys.executable, "-m", "trial.service", "stop"], capture_output=True, text=True)
    assert str(pid) in stopped.stdout
    psutil.Process(pid).wait(30)


FORK_HOOK = '''
import os, sys

def _fork_after_tvm():
    if "tvm" in sys.modules:
        with open(os.environ["OPEVO_FORK_LOG"], "a") as log:
            log.write(f"{os.getpid()} {sys.argv[:3]} forked after importing tvm\\n")

os.register_at_fork(before=_fork_after_tvm)
'''


@pytest.fixture
def fork_watch(tmp_path, monkeypatch):
    """Every Python process started from here on (the service, its workers) logs a fork made after TVM
    was imported: on a GPU machine the child of such a fork cannot initialise CUDA."""
    hook = tmp_path / "forkwatch"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FORK_HOOK)
    log = tmp_path / "forks.log"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), TESTS, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OPEVO_FORK_LOG", str(log))
    return log


def test_the_fork_watch_sees_a_fork_after_importing_tvm(fork_watch):
    subprocess.run([sys.executable, "-c", "import os, tvm; pid = os.fork(); os._exit(0) if pid == 0 else os.wait()"],
                   check=True)
    assert "forked after importing tvm" in fork_watch.read_text()


def test_no_measuring_process_is_forked_from_one_that_imported_tvm(private_service, fork_watch):
    for options in (FAST, faulty("Crash"), faulty("CompileError"), faulty("Hang", run_timeout_s=2)):
        assert measure(WL, None, options).status in ("ok", "runtime_error", "compile_error", "timeout")
    assert measure(WL, None, FAST).status == "ok"
    assert not fork_watch.exists(), fork_watch.read_text()


def test_trials_of_two_experiments_at_once_share_the_service_and_keep_their_results(private_service, tmp_path):
    """Two experiments' trial processes (their own folders and experiment ids) measure at the same time
    through one service; each gets and records its own result."""
    procs = []
    for exp in ("expA", "expB"):
        folder = tmp_path / exp
        folder.mkdir()
        env = {**os.environ, "NNI_EXP_ID": exp, "NNI_TRIAL_JOB_ID": "t0"}
        procs.append(subprocess.Popen([sys.executable, "-m", "trial", "mm", WL.spec, "--target", "llvm",
                                       "--min-repeat-ms", "1"], cwd=folder, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    assert [r["status"] for r in reports] == ["ok", "ok"]
    assert status()["served"] == {"ok": 2}
    recorded = {r.experiment for r in Records().query(workload=WL.key)}
    assert recorded == {"expA", "expB"}


def test_a_service_whose_checkout_was_replaced_gives_way_to_one_that_runs_the_new_checkout(private_service, tmp_path):
    """A checkout deleted and laid again at the same path, with its files' times (so the same address): the
    next trials reach a new service, not the old one, whose workers ran from the folder that had gone (its
    builds failed with "[Errno 2] No such file or directory" until it idled out)."""
    suite = tmp_path / "suite"

    def lay():
        for folder in ("trial", "tuners", "searchspace"):
            shutil.copytree(client.ROOT / folder, suite / folder)  # copy2: modification times kept

    def trials(*specs):
        env = {**os.environ, "PYTHONPATH": str(suite)}
        procs = [subprocess.Popen([sys.executable, "-m", "trial", "mm", spec, "--target", "llvm", "--min-repeat-ms", "1"],
                                  cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for spec in specs]
        reports = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
        server = subprocess.run([sys.executable, "-m", "trial.service", "status"], cwd=suite, env=env,
                                capture_output=True, text=True, check=True)
        return [(r["status"], r["reason"]) for r in reports], json.loads(server.stdout)["pid"]

    lay()
    first, old = trials("N16K16M16")
    assert first == [("ok", "")]
    shutil.rmtree(suite)
    lay()
    after, new = trials("N16K16M32", "N32K16M16", "N16K32M16")  # concurrent builds: a new build worker too
    assert after == [("ok", "")] * 3
    assert new != old
    wait_for(lambda: not psutil.pid_exists(old), 10, "the old service to exit")


def test_a_file_removed_while_the_code_is_listed_does_not_fail_the_trial(monkeypatch, tmp_path):
    # A checkout or sync under way removes a file between the listing and its stat: the address is still
    # found (the code's version is what is there), and a file that changes gives a new address.
    for folder in ("trial", "tuners", "searchspace"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "kept.py").write_text("x = 1\n")
    gone = tmp_path / "tuners" / "gone.py"
    listed = Path.rglob

    def rglob_then_remove(self, pattern):
        found = list(listed(self, pattern))
        if self.name == "tuners":
            found.append(gone)  # listed, then removed before its stat
        return iter(found)

    monkeypatch.setattr(client, "ROOT", tmp_path)
    monkeypatch.setattr(Path, "rglob", rglob_then_remove)
    before = client.address().key
    (tmp_path / "trial" / "kept.py").write_text("x = 22\n")
    assert client.address().key != before


def test_a_failed_run_on_a_gpu_says_how_much_of_its_memory_was_free():
    """An out-of-memory error tells whether other processes had filled the device; a CPU has nothing to say."""
    gpu = SimpleNamespace(device=lambda index: SimpleNamespace(available_global_memory=3 * 2**30,
                                                               total_global_memory=80 * 2**30))
    assert runner._free_memory(gpu, 0) == " (device memory free: 3.0 of 80.0 GiB)"
    assert runner._free_memory(resolve("llvm"), 0) == ""


def test_build_workers_see_no_gpu_and_runners_see_the_callers(monkeypatch):
    """A build worker compiles for the target the service describes, so it is given no device: TVM's CUDA build
    opens a context where it sees one (about 0.5 GiB of the GPU per build worker, seen on an H200).  Runners
    keep the devices of the service's environment."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    builders = Builders(1)
    measuring = Worker("runner-test")  # as a runner is started
    try:
        assert [builders.all[0].call("os:getenv", name) for name in DEVICE_VARIABLES] == ["", "", ""]
        assert measuring.call("os:getenv", "CUDA_VISIBLE_DEVICES") == "2"
    finally:
        builders.all[0].stop()
        measuring.stop()

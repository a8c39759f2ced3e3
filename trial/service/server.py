"""The measuring service: one per machine and environment, through which every measurement runs.

Trials, benchmarks and exports send requests here (client.py starts the service when none
runs).  The service itself imports no TVM and touches no device: it hands each build to a pool of
build workers and each run to the runner of a free device (one per device, holding its context),
all spawned processes (worker.py), so the work of many trial processes shares warm workers.
A request whose trial has gone is dropped before it reaches a device.  The service exits after
$OPEVO_SERVICE_IDLE_S seconds without requests (default 300), on `stop`, on SIGTERM, or as soon as
its checkout is replaced (checkout.py), and kills its workers as it goes; workers also exit by
themselves if it dies.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from .. import diskfull
from ..remote import LOCAL
from ..results import Status, error_reason
from ..target import Target, TargetError
from . import nnitrial
from .checkout import Checkout
from .client import ROOT
from .pools import Builders, Devices, Runner
from .worker import CallCancelled, CallFailed, Worker, WorkerDied, WorkerTimeout

WAIT_FOR_CPU_S = 3600.0  # the most a build waits for CPU timings (each ends within its run timeout)


class Service:
    def __init__(self, workdir: Path, idle_s: float, build_workers: int, checkout: Checkout) -> None:
        self.workdir, self.idle_s, self.checkout = workdir, idle_s, checkout
        self.builders = Builders(build_workers)
        self.devices = Devices()
        self.started = time.time()
        self.served: Counter[str] = Counter()
        self.active, self.last = 0, time.monotonic()
        self.closing = threading.Event()
        self._lock = threading.Lock()

    # --- requests -------------------------------------------------------------------------------
    def measure(self, m: dict[str, Any], conn: Connection) -> dict[str, Any] | None:
        """Build and run one configuration; None if the requesting trial went away meanwhile.

        m["library"]: an already built library, only verified and timed; m["keep"]: a folder where the
        build leaves its library (kernel.so) and source, instead of a scratch file.  The answer's "cpu_s"
        holds the CPU seconds of its build and its run, in their workers.
        """
        marks, cpu = {"received": time.time()}, {}
        options = m["options"]
        out: dict[str, Any] = {"params": m["params"], "marks": marks, "cpu_s": cpu}
        try:
            target = self.devices.target(options["target"], options["runner"])
        except TargetError as err:
            return {**out, "status": Status.INVALID, "reason": str(err)}
        out.update(target=target.label, device=target.device_name)
        scratch = not (m.get("library") or m.get("keep"))
        path = Path(m.get("library") or (Path(m["keep"]) / "kernel.so" if m.get("keep") else
                                         self.workdir / f"{uuid.uuid4().hex}.so"))

        def gone() -> bool:  # the trial sends nothing more: readable means it has hung up
            return conn.poll(0)

        algorithm = "direct"  # how a library built elsewhere (MetaSchedule's) computes
        try:
            if not m.get("library"):
                with self.builders.worker() as builder:
                    built = self._build(builder, m, target, path, marks, gone)
                if built is None:
                    return None
                algorithm = built.pop("algorithm", algorithm)
                cpu["build"] = built.pop("cpu_s", None)
                out.update(built)
                if built["status"] != "built":
                    return out
            marks["built"] = time.time()
            with self.devices.runner(target, options["runner"]) as runner:
                ran = None if gone() else self._run(runner, m, target, path, algorithm, marks, gone)
            if ran is None:
                return None
            cpu["run"] = ran.pop("cpu_s", None)
            out.update(ran, device_index=runner.index)
            return out
        finally:
            marks["done"] = time.time()
            if scratch:
                path.unlink(missing_ok=True)

    @staticmethod
    def _build(builder: Worker, m: dict[str, Any], target: Target, path: Path, marks: dict[str, float],
               gone: Callable[[], bool]) -> dict[str, Any] | None:
        timeout = m["options"]["build_timeout_s"]
        marks["building"] = time.time()

        def progress(kind: str, _payload: Any) -> float:
            if kind == "waiting":  # for a CPU timing (trial/devicelock.py): each is bounded by its run timeout
                return WAIT_FOR_CPU_S
            marks[kind] = time.time()  # "building": the CPU is ours to share, the build's deadline starts
            return timeout

        try:
            return builder.call("trial.service.builder:build_library", m["op"], m["spec"], m["params"],
                                m["options"]["template"], target.describe(), str(path), m["sys_path"],
                                bool(m.get("keep")), timeout=timeout, progress=progress, cancelled=gone)
        except CallCancelled:
            return None
        except WorkerTimeout:
            return {"status": Status.TIMEOUT, "reason": f"build exceeded {timeout:g} s; killed"}
        except WorkerDied as err:  # LLVM exits where it cannot write: a full disk is the likely cause
            full = diskfull.low(path.parent, *diskfull.temp_folders())
            return {"status": Status.COMPILE_ERROR, "reason": f"{err} during build" + (f"; {full}" if full else "")}
        except CallFailed as err:
            return {"status": Status.COMPILE_ERROR, "reason": str(err)}

    @staticmethod
    def _run(runner: Runner, m: dict[str, Any], target: Target, path: Path, algorithm: str,
             marks: dict[str, float], gone: Callable[[], bool]) -> dict[str, Any] | None:
        options = m["options"]
        limit = options["run_timeout_s"]

        def progress(kind: str, _payload: Any) -> float:
            marks[kind] = time.time()  # "held": the device is ours, the run's deadline starts
            return limit

        try:
            result = runner.worker.call("trial.service.runner:run_library", str(path), m["op"], m["spec"], options["seed"],
                                        options["repeat"], options["min_repeat_ms"], target.describe(),
                                        runner.index, runner.where, algorithm, progress=progress, cancelled=gone)
        except CallCancelled:
            return None
        except WorkerTimeout:
            return {"status": Status.TIMEOUT, "reason": f"kernel run exceeded {limit:g} s; killed"}
        except (WorkerDied, CallFailed) as err:
            runner.worker.stop()
            return {"status": Status.RUNTIME_ERROR, "reason": f"{err} during run"}
        if result.pop("replace", False):
            runner.worker.stop()
        return result

    def describe(self, kind: str, where: str) -> dict[str, Any]:
        try:
            return {"target": self.devices.target(kind, where).describe()}
        except TargetError as err:
            return {"error": str(err)}

    @staticmethod
    def nni(m: dict[str, Any]) -> dict[str, Any]:
        """A trial's exchange with NNI's trial channel, done here so that the trial need not import NNI."""
        try:
            if m["request"] == "nni_receive":
                return nnitrial.fetch(m["channel"])
            nnitrial.send(m["channel"], m["parameter_id"], m["trial_job_id"], m["metric"])
            return {}
        except Exception as err:  # NNI's channel refused or went away: the trial says so and fails
            return {"error": f"NNI's trial channel {m['channel']}: {error_reason(err)}"}

    def status(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "up_s": round(time.time() - self.started, 1), "active": self.active - 1,
                "served": dict(self.served), "idle_exit_s": self.idle_s,
                "workers": {w.name: w.pid for w in self._workers() if w.alive}}

    def handle(self, conn: Connection) -> None:
        try:
            if self._give_way():  # no answer: the requester asks again, and so starts the successor
                self._wake()
                return
            m = conn.recv()
            request = m.get("request")
            if request == "measure":
                try:
                    answer = self.measure(m, conn)
                except Exception as err:  # a fault of the service's own: the trial still gets a status
                    answer = {"status": Status.RUNTIME_ERROR, "params": m.get("params"),
                              "reason": f"measuring service failed: {error_reason(err)}"}
                if answer is None:
                    return
                self.served[str(answer["status"])] += 1
            elif request == "describe":
                answer = self.describe(m["target"], m.get("runner", LOCAL))
            elif request in ("nni_receive", "nni_report"):
                answer = self.nni(m)
            elif request == "status":
                answer = self.status()
            elif request == "stop":
                answer = {"stopping": os.getpid()}
                self.closing.set()
            else:
                answer = {"error": f"unknown request {request!r}"}
            conn.send(answer)
        except (EOFError, OSError):
            pass  # the requester went away
        finally:
            conn.close()
            with self._lock:
                self.active -= 1
                self.last = time.monotonic()

    # --- lifetime -------------------------------------------------------------------------------
    def serve(self, listener: Listener, socket: str, key: bytes) -> None:
        self._address = (socket, key)
        threading.Thread(target=self._watch_idle, daemon=True).start()
        threading.Thread(target=self._warm_builder, daemon=True).start()
        while True:
            try:
                conn = listener.accept()
            except (AuthenticationError, EOFError, OSError):
                if self.closing.is_set():
                    return
                continue
            with self._lock:
                if self.closing.is_set():
                    conn.close()
                    return
                self.active += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def _warm_builder(self) -> None:
        with self.builders.worker() as builder:
            try:
                builder.call("trial.service.builder:warm")
            except (CallFailed, WorkerDied) as err:
                print(f"build worker did not start: {err}", file=sys.stderr, flush=True)

    def _give_way(self) -> bool:
        """Whether the checkout was replaced, in which case the service stops taking requests: those that
        find it gone start a new one, which runs the checkout there now."""
        if not self.checkout.replaced():
            return False
        if not self.closing.is_set():
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} checkout {self.checkout.root} replaced; stopping", flush=True)
        self.closing.set()
        return True

    def _wake(self) -> None:
        """End the accept loop (once `closing` is set) with a connection of our own."""
        socket, key = self._address
        try:
            Client(socket, family="AF_UNIX", authkey=key).close()
        except (OSError, EOFError, AuthenticationError):
            pass

    def _watch_idle(self) -> None:
        while not self.closing.wait(0.5) and not self._give_way():
            with self._lock:
                if self.active == 0 and time.monotonic() - self.last > self.idle_s:
                    self.closing.set()
        self._wake()

    def _workers(self) -> list[Worker]:
        return [*self.builders.all, *(r.worker for r in self.devices.all)]

    def shutdown(self) -> None:
        for worker in self._workers():
            worker.kill_now()
        shutil.rmtree(self.workdir, ignore_errors=True)


def serve(socket: str, key_file: Path, workdir: Path, idle_s: float, build_workers: int) -> None:
    """Run the service until it is idle, stopped or terminated."""
    key = secrets.token_bytes(32)
    shutil.rmtree(workdir, ignore_errors=True)  # what a killed service left
    workdir.mkdir(parents=True)
    tmp = key_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.touch(mode=0o600)
    tmp.write_bytes(key)
    tmp.replace(key_file)
    Path(socket).unlink(missing_ok=True)  # a stale socket of a killed service; clients start us under a lock
    service = Service(workdir, idle_s, build_workers, Checkout(ROOT))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = Listener(socket, family="AF_UNIX", authkey=key)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} measuring service {os.getpid()} serving on {socket}, "
          f"{build_workers} build workers, idle exit {idle_s:g} s", flush=True)
    try:
        service.serve(listener, socket, key)
    finally:
        # Listener.close() would remove the socket path, even where a successor now serves on it (and
        # raise where it is gone): the path is removed below, and only while it is ours.
        unlink = getattr(getattr(listener, "_listener", None), "_unlink", None)  # CPython's finalizer
        if unlink is not None:
            unlink.cancel()
        listener.close()
        if key_file.exists() and key_file.read_bytes() == key:  # ours, not a successor's
            key_file.unlink(missing_ok=True)
            Path(socket).unlink(missing_ok=True)
        service.shutdown()
        service.checkout.close()
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} measuring service {os.getpid()} stopped after serving "
              f"{dict(service.served)}", flush=True)

"""A worker: a spawned Python process that runs one call at a time for the measuring service.

Builds and device runs happen in workers, never in the process that asks for them, so a crash, a
hang or a poisoned GPU context costs a worker, which is replaced, and never the service or a trial.
Workers are spawned (a fresh interpreter), never forked: a process forked from one that has
initialised CUDA cannot use CUDA (docs/gpu-processes.md says why importing TVM does that).  They
are reused across calls, so TVM's import and a device's context are paid once per worker, not
per trial (TVM's own PopenPoolExecutor does the same for MetaSchedule's builder and runner).

A call names its function as "module:function", imported in the worker, so the owner never imports
what its workers run (TVM).  The owner enforces deadlines itself (`poll` with a timeout, then kill), so a call stuck in native
code that holds the GIL still ends; a worker whose owner dies exits on its own.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .. import blasthreads

_SPAWN = mp.get_context("spawn")
DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
CANCEL_POLL_S = 0.5
_conn = None  # inside a worker: the pipe to its owner


class WorkerDied(RuntimeError):
    """The worker process ended during a call (a crash, or killed from outside)."""


class WorkerTimeout(RuntimeError):
    """A call outlived its deadline; the worker was killed."""


class CallCancelled(RuntimeError):
    """The owner gave the call up (its requester went away); the worker was killed."""


class CallFailed(RuntimeError):
    """The called function raised; the message is its traceback's informative tail."""


def report(kind: str, payload: Any = None) -> None:
    """Inside a worker: tell the owner how far the current call has got (see `Worker.call`)."""
    _conn.send(("progress", (kind, payload)))


def cpu_seconds() -> float:
    """Inside a worker: the CPU seconds (user and system) this process and the children it waited for
    (a linker) have used, so that a call can say what it cost the host."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _watch_owner(owner: int) -> None:
    """Exit when the owner has gone (its pid is no longer our parent), even in the middle of a call."""
    while os.getppid() == owner:
        time.sleep(1.0)
    os._exit(3)


def _serve(conn: Any, owner: int, devices: bool = True) -> None:
    global _conn
    _conn = conn
    if not devices:  # TVM's CUDA build opens a context (about 0.5 GiB of the GPU) where it sees a device
        os.environ.update(dict.fromkeys(DEVICE_VARIABLES, ""))
    blasthreads.load_numpy()  # before TVM loads it with a BLAS thread per core
    # TVM's FFI imports PyTorch where it is installed and asks it whether CUDA is available, which
    # initialises CUDA and takes seconds; workers never use PyTorch (docs/gpu-processes.md).
    sys.modules.setdefault("torch", None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the owner, which stops us
    threading.Thread(target=_watch_owner, args=(owner,), daemon=True).start()
    while True:
        try:
            function, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            module, _, name = function.partition(":")
            answer = ("done", getattr(importlib.import_module(module), name)(*args))
        except Exception as err:  # the owner decides what a failure means
            answer = ("error", "".join(traceback.format_exception_only(err)).strip())
        conn.send(answer)


def exit_reason(code: int | None) -> str:
    """A worker's end as a measurement reports it: 'measuring process killed by SIGABRT', ..."""
    if code is not None and code < 0:
        return f"measuring process killed by {signal.Signals(-code).name}"
    return f"measuring process exited with code {code}"


class Worker:
    """A spawned process that runs `call`s one at a time; started on first use, again after it dies."""

    def __init__(self, name: str, devices: bool = True) -> None:
        """`devices` False: the worker sees no GPU (a build worker, which compiles for a described target)."""
        self.name, self.devices = name, devices
        self._proc: Any = None
        self._conn: Any = None
        self._lock = threading.Lock()  # one call at a time, and no start while one runs

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        ours, theirs = _SPAWN.Pipe()
        self._proc = _SPAWN.Process(target=_serve, args=(theirs, os.getpid(), self.devices), name=self.name,
                                    daemon=True)
        self._proc.start()
        theirs.close()
        self._conn = ours

    def call(self, function: str, *args: Any, timeout: float | None = None,
             progress: Callable[[str, Any], float | None] | None = None,
             cancelled: Callable[[], bool] | None = None) -> Any:
        """`function(*args)` ("module:function") in the worker; its value, or CallFailed, WorkerDied,
        WorkerTimeout or CallCancelled.

        `timeout` is seconds from now; `progress(kind, payload)` is called for each `report` of the
        call and may return a new timeout, in seconds from then (None keeps the current one);
        `cancelled()`, asked every `CANCEL_POLL_S`, gives the call up when true.
        """
        with self._lock:
            if not self.alive:
                self._start()
            self._conn.send((function, args))
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if cancelled is not None:
                    wait = CANCEL_POLL_S if wait is None else min(wait, CANCEL_POLL_S)
                if not self._conn.poll(wait):
                    if deadline is not None and time.monotonic() >= deadline:
                        self._kill()
                        raise WorkerTimeout(f"{self.name} exceeded {timeout:g} s")
                    if cancelled is not None and cancelled():
                        self._kill()
                        raise CallCancelled(self.name)
                    continue
                try:
                    kind, payload = self._conn.recv()
                except (EOFError, OSError):
                    raise WorkerDied(self._reap()) from None
                if kind == "done":
                    return payload
                if kind == "error":
                    raise CallFailed(payload)
                renewed = progress(*payload) if progress else None
                if renewed is not None:
                    timeout, deadline = renewed, time.monotonic() + renewed

    def _reap(self) -> str:
        self._proc.join(5)
        reason = exit_reason(self._proc.exitcode)
        self._kill()
        return reason

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
            self._conn.close()
        self._proc = self._conn = None

    def stop(self) -> None:
        """Kill the process (a later call starts a new one); waits for a call in progress to end."""
        with self._lock:
            self._kill()

    def kill_now(self) -> None:
        """Kill the process without waiting for the call in progress, which then raises WorkerDied."""
        proc = self._proc
        if proc is not None:
            proc.kill()

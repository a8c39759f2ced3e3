"""The workers the measuring service owns: build workers, and one runner per device of each target.

Each pool is a queue of free workers: a request waits for a free one, so the runner of a device is
that device's queue, and builds never outnumber the build workers.  The devices behind an RPC
runner (trial/remote.py) are its servers: one runner worker per server registered under its key.
"""
from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..remote import LOCAL
from ..target import Target, TargetError, save
from .worker import CallFailed, Worker, WorkerDied, WorkerTimeout

DESCRIBE_TIMEOUT_S = 120.0


class Runner:
    """The worker that runs kernels on one device (`where`: local, or an RPC runner and its server slot)."""

    def __init__(self, target: Target, index: int, where: str = LOCAL, worker: Worker | None = None) -> None:
        self.target, self.index, self.where = target, index, where
        self.worker = worker or Worker(f"runner-{target.kind}-{index}" + ("" if where == LOCAL else f"-{where}"))


class Devices:
    """The targets found through each runner (local or RPC), and a queue of free runners per target kind."""

    def __init__(self) -> None:
        self._targets: dict[tuple[str, str], Target | TargetError] = {}
        self._free: dict[tuple[str, str], queue.Queue[Runner]] = {}
        self._serving: dict[tuple[str, str], int] = {}  # runners not retired, per queue
        self.all: list[Runner] = []
        self._lock = threading.Lock()

    def target(self, kind: str, where: str = LOCAL) -> Target:
        """The target `kind` resolves to through `where`, found once by a runner (which then serves its
        device 0, or its first server)."""
        with self._lock:
            found = self._targets.get((where, kind)) or self._resolve(kind, where)
            if not (isinstance(found, TargetError) and where != LOCAL):  # a tracker may yet start
                self._targets[where, kind] = found
        if isinstance(found, TargetError):
            raise found
        return found

    def _resolve(self, kind: str, where: str) -> Target | TargetError:
        probe = Worker(f"runner-{kind}-0")
        try:
            answer = probe.call("trial.service.runner:describe", kind, where, timeout=DESCRIBE_TIMEOUT_S)
        except (CallFailed, WorkerDied, WorkerTimeout) as err:
            probe.stop()
            return TargetError(f"could not query the {kind} device: {err}")
        if "error" in answer:
            probe.stop()
            return TargetError(answer["error"])
        target = Target.from_description(answer["target"])
        save(kind, target, where)  # what trials check knobs against before they send a request
        if (where, target.kind) in self._free:
            probe.stop()
        else:
            free: queue.Queue[Runner] = queue.Queue()
            for index in range(target.num_devices):
                runner = Runner(target, index, where, probe if index == 0 else None)
                self.all.append(runner)
                free.put(runner)
            self._free[where, target.kind] = free
            self._serving[where, target.kind] = target.num_devices
        return target

    @contextmanager
    def runner(self, target: Target, where: str = LOCAL) -> Iterator[Runner]:
        """A free runner of `target`'s kind, waiting for one; a runner whose worker died is revived first."""
        free = self._free[where, target.kind]
        runner = free.get()
        try:
            yield runner
        finally:
            if runner.worker.alive:
                free.put(runner)
            else:
                threading.Thread(target=self._revive, args=(runner, free), daemon=True).start()

    def _revive(self, runner: Runner, free: queue.Queue[Runner]) -> None:
        """Restart a runner's worker.  A runner of an RPC runner that finds no free server (its server
        went away) is retired while others serve, so that trials go to the servers that remain."""
        try:
            runner.worker.call("trial.service.runner:warm", runner.target.describe(), runner.index, runner.where,
                               timeout=DESCRIBE_TIMEOUT_S)
        except (CallFailed, WorkerDied, WorkerTimeout) as err:
            print(f"runner {runner.worker.name} did not restart: {err}", file=sys.stderr, flush=True)
            key = (runner.where, runner.target.kind)
            with self._lock:
                retire = runner.where != LOCAL and self._serving[key] > 1
                self._serving[key] -= retire
            if retire:
                runner.worker.stop()
                return
        free.put(runner)


class Builders:
    """Build workers, started as concurrent builds need them; the most recently used is reused first."""

    def __init__(self, size: int) -> None:
        self._free: queue.LifoQueue[Worker] = queue.LifoQueue()
        self.all = [Worker(f"build-{i}", devices=False) for i in range(size)]
        for worker in reversed(self.all):
            self._free.put(worker)

    @contextmanager
    def worker(self) -> Iterator[Worker]:
        worker = self._free.get()
        try:
            yield worker
        finally:
            self._free.put(worker)

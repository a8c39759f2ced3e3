"""The workers the measuring service owns: build workers, and one runner per device of each target.

Each pool is a queue of free workers: a request waits for a free one, so the runner of a device is
that device's queue, and builds never outnumber the build workers.
"""
from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..target import Target, TargetError, save
from .worker import CallFailed, Worker, WorkerDied, WorkerTimeout

DESCRIBE_TIMEOUT_S = 120.0


class Runner:
    """The worker that runs kernels on one device."""

    def __init__(self, target: Target, index: int, worker: Worker | None = None) -> None:
        self.target, self.index = target, index
        self.worker = worker or Worker(f"runner-{target.kind}-{index}")


class Devices:
    """The targets found on this machine, and a queue of free runners per target kind."""

    def __init__(self) -> None:
        self._targets: dict[str, Target | TargetError] = {}
        self._free: dict[str, queue.Queue[Runner]] = {}
        self.all: list[Runner] = []
        self._lock = threading.Lock()

    def target(self, kind: str) -> Target:
        """The target `kind` resolves to here, found once by a runner (which then serves its device 0)."""
        with self._lock:
            if kind not in self._targets:
                self._targets[kind] = self._resolve(kind)
        found = self._targets[kind]
        if isinstance(found, TargetError):
            raise found
        return found

    def _resolve(self, kind: str) -> Target | TargetError:
        probe = Worker(f"runner-{kind}-0")
        try:
            answer = probe.call("trial.service.runner:describe", kind, timeout=DESCRIBE_TIMEOUT_S)
        except (CallFailed, WorkerDied, WorkerTimeout) as err:
            probe.stop()
            return TargetError(f"could not query the {kind} device: {err}")
        if "error" in answer:
            probe.stop()
            return TargetError(answer["error"])
        target = Target.from_description(answer["target"])
        save(kind, target)  # what trials check knobs against before they send a request
        if target.kind in self._free:
            probe.stop()
        else:
            free: queue.Queue[Runner] = queue.Queue()
            for index in range(target.num_devices):
                runner = Runner(target, index, probe if index == 0 else None)
                self.all.append(runner)
                free.put(runner)
            self._free[target.kind] = free
        return target

    @contextmanager
    def runner(self, target: Target) -> Iterator[Runner]:
        """A free runner of `target`'s kind, waiting for one; a runner whose worker died is revived first."""
        free = self._free[target.kind]
        runner = free.get()
        try:
            yield runner
        finally:
            if runner.worker.alive:
                free.put(runner)
            else:
                threading.Thread(target=self._revive, args=(runner, free), daemon=True).start()

    @staticmethod
    def _revive(runner: Runner, free: queue.Queue[Runner]) -> None:
        try:
            runner.worker.call("trial.service.runner:warm", runner.target.describe(), runner.index,
                               timeout=DESCRIBE_TIMEOUT_S)
        except (CallFailed, WorkerDied, WorkerTimeout) as err:
            print(f"runner {runner.worker.name} did not restart: {err}", file=sys.stderr, flush=True)
        free.put(runner)


class Builders:
    """Build workers, started as concurrent builds need them; the most recently used is reused first."""

    def __init__(self, size: int) -> None:
        self._free: queue.LifoQueue[Worker] = queue.LifoQueue()
        self.all = [Worker(f"build-{i}") for i in range(size)]
        for worker in reversed(self.all):
            self._free.put(worker)

    @contextmanager
    def worker(self) -> Iterator[Worker]:
        worker = self._free.get()
        try:
            yield worker
        finally:
            self._free.put(worker)

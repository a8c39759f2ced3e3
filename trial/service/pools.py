"""The workers the measuring service owns: build workers, and runners for the devices of each target.

Each pool is a queue of free workers: a request waits for a free one, and builds never outnumber the
build workers.  A local GPU has two runners (`RUNNERS_PER_GPU`), which take turns on its device lock
(trial/devicelock.py): while one times a kernel, the other loads the next library and waits at the
lock, so the GPU does not stand idle through the hand-over between the service and a runner (the
call's round trip and the runner's own Python, slow on a busy host).  The CPU has one.  The devices
behind an RPC runner (trial/remote.py) are its servers: one runner worker per server registered under
its key (a server serves one session at a time).
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
RUNNERS_PER_GPU = 2


def runners_per_device(target: Target, where: str) -> int:
    """How many runner workers serve each device of `target` found through `where`."""
    return RUNNERS_PER_GPU if target.is_gpu and where == LOCAL else 1


class Runner:
    """The worker that runs kernels on one device (`where`: local, or an RPC runner and its server slot)."""

    def __init__(self, target: Target, index: int, where: str = LOCAL, worker: Worker | None = None,
                 turn: int = 0) -> None:
        self.target, self.index, self.where = target, index, where
        name = f"runner-{target.kind}-{index}" + (f"-{turn}" if turn else "") + ("" if where == LOCAL else f"-{where}")
        self.worker = worker or Worker(name)


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
            turns = runners_per_device(target, where)
            for turn in range(turns):  # the devices' first runners first, so that a lone request finds a warm one
                for index in range(target.num_devices):
                    runner = Runner(target, index, where, probe if index == turn == 0 else None, turn)
                    self.all.append(runner)
                    free.put(runner)
            self._free[where, target.kind] = free
            self._serving[where, target.kind] = target.num_devices * turns
            if where == LOCAL:
                self._warm_all(target, free)
        return target

    def _warm_all(self, target: Target, free: queue.Queue[Runner]) -> None:
        """Start every other local runner's process and device context now, each in its own thread, so
        that an experiment's first trials on GPUs 1..N do not each wait for a process and a context (a
        few seconds each, which on N GPUs the first wave of trials would otherwise spend in turn).  A
        runner being warmed is out of the queue; one that fails is put back and revived at first use."""
        waiting = [free.get() for _ in range(free.qsize())]
        for runner in waiting:
            if runner.worker.alive:  # the probe, whose device is already up
                free.put(runner)
            else:
                threading.Thread(target=self._revive, args=(runner, free), daemon=True).start()

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

"""One kernel timed per device at a time, across every process on this machine.

Within the measuring service a GPU's two runners take turns on its lock, and so do the runners
of other services (another user's environment, another suite checkout) and the vendor baselines.
Only the run-and-time stage holds a device's lock.  Locks are flock-based files (`hold` blocks in
flock, so the next holder has the lock as it is released; `acquire` tries each device's through
filelock), so a killed process releases its lock at once.  They live in $OPEVO_LOCK_DIR
(default: <tmp>/opevo-locks) and are named after the physical device, so trials that see
different CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES subsets still exclude each other correctly.

The CPU ("llvm") is one device, and the same cores also compile: a kernel timed while builds ran
beside it measured its share of a busy machine (12.7-66 GFLOPS for a configuration that times at
49-69 alone, with eight trials at once on two cores).  So builds hold the CPU's lock shared
(`cores`) and a CPU timing holds it exclusively: a timing waits for the builds under way to end
and holds new ones back until it is done, and the kernel has the cores to itself (as far as this
lock folder's processes go; others show in the result's warning, trial/noise.py).  It costs little:
while a timing waits, the cores still compile, and a timing is short (its repeats fill
`min_repeat_ms` each, 0.2 s by default) against a build.  A gate taken before either mode keeps a
stream of builds from starving the timing (a classic turnstile): once a timing waits, new builds
queue behind it.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from filelock import FileLock, Timeout

_VISIBLE = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES"}
CPU = "llvm"


def lock_dir() -> Path:
    path = Path(os.environ.get("OPEVO_LOCK_DIR") or Path(tempfile.gettempdir()) / "opevo-locks")
    path.mkdir(parents=True, exist_ok=True)
    return path


def physical_ids(kind: str, count: int) -> list[str]:
    """Names of the `count` visible devices of `kind` as the machine numbers them."""
    visible = os.environ.get(_VISIBLE.get(kind, ""), "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    return ids[:count] if len(ids) >= count else [str(i) for i in range(count)]


def _lock(kind: str, name: str) -> FileLock:
    return FileLock(str(lock_dir() / f"{kind}-{name}.lock"))


@contextmanager
def cores(exclusive: bool, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Hold the CPU's lock: shared by builds, exclusive for a CPU timing; `waiting()` is called once
    if the lock is not free at once, before waiting for it.

    flock on the same file as `FileLock` takes, so either excludes the other."""
    waited = []

    def take(file: IO[str], mode: int) -> None:
        try:
            fcntl.flock(file, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if not waited:
                waited.append(waiting())
            fcntl.flock(file, mode)

    with open(lock_dir() / f"{CPU}-0.lock", "a") as cpu:  # not inherited by a compiler the build starts
        with open(lock_dir() / f"{CPU}-gate.lock", "a") as gate:
            take(gate, fcntl.LOCK_EX)
            take(cpu, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield  # closing the file releases the lock


@contextmanager
def hold(kind: str, index: int, count: int) -> Iterator[None]:
    """Hold the lock of visible device `index` of `kind` (one of `count` visible), waiting for it."""
    if kind == CPU:
        with cores(exclusive=True):
            yield
        return
    with open(lock_dir() / f"{kind}-{physical_ids(kind, count)[index]}.lock", "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # blocking: the device's next runner takes it as it is released
        yield  # closing the file releases the lock


@contextmanager
def acquire(kind: str, count: int, poll_s: float = 0.05) -> Iterator[int]:
    """Hold the lock of a free device of `kind` (one of `count` visible); yields its visible index."""
    if kind == CPU:
        with cores(exclusive=True):
            yield 0
        return
    locks = [_lock(kind, name) for name in physical_ids(kind, count)]
    while True:
        for index, lock in enumerate(locks):
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                yield index
            finally:
                lock.release()
            return
        time.sleep(poll_s)

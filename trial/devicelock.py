"""One kernel timed per device at a time, across every process on this machine.

Within the measuring service each device has one runner, which is its queue; the lock makes
runners of other services (another user's environment, another suite checkout) and the vendor
baselines take turns with it.  Only the run-and-time stage holds a device's lock.  Locks are
flock-based files (filelock), so a killed process releases its lock at once.  They live in $OPEVO_LOCK_DIR
(default: <tmp>/opevo-locks) and are named after the physical device, so trials that see
different CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES subsets still exclude each other correctly.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

_VISIBLE = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES"}


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
def hold(kind: str, index: int, count: int) -> Iterator[None]:
    """Hold the lock of visible device `index` of `kind` (one of `count` visible), waiting for it."""
    with _lock(kind, physical_ids(kind, count)[index]):
        yield


@contextmanager
def acquire(kind: str, count: int, poll_s: float = 0.05) -> Iterator[int]:
    """Hold the lock of a free device of `kind` (one of `count` visible); yields its visible index."""
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

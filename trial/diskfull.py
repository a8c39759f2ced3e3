"""Saying that the disk is full where that is why a write failed.

A full disk reaches the user in many words: Python's "[Errno 28] No space left on device", the
linker's "final link failed: No space left on device", SQLite's "database or disk is full", and, in
the WAL mode the records store uses, SQLite's "disk I/O error" (SQLITE_IOERR_SHMSIZE: its shared
memory file could not grow), which names no cause at all.  `full` turns each into "the disk holding
<folder> is full (<n> bytes free)", naming the folder that was being written.  An error that says
the disk is full is taken at its word; an I/O error is blamed on the disk only where the folder's
disk has less than LOW_BYTES free, so a failing disk is not called a full one.  LLVM says nothing
to its caller at all: it exits its process when it cannot write its output, so a build worker that
dies while a disk it writes to has less than LOW_BYTES free is blamed on that disk (`low`).
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

LOW_BYTES = 1 << 20
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_WORDS = ("No space left on device", "database or disk is full", "Disk quota exceeded")
_IO_WORDS = ("disk I/O error",)


def free_bytes(folder: str | Path) -> int | None:
    """Bytes free to this user on the disk holding `folder` (its nearest existing parent); None if unknown."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def temp_folders() -> list[str]:
    """Where temporary files go: $TMPDIR (and its kin) as set, and where Python's tempfile chose, which
    passes over a folder it cannot write (a full one) for the next."""
    named = [os.environ[v] for v in ("TMPDIR", "TEMP", "TMP") if os.environ.get(v)]
    return [*named, tempfile.gettempdir()]


def low(*folders: str | Path) -> str | None:
    """"the disk holding <folder> is full (<n> bytes free)" where one of `folders` has less than LOW_BYTES free."""
    free = {Path(f): free_bytes(f) for f in folders}
    tight = sorted((left, f) for f, left in free.items() if left is not None and left < LOW_BYTES)
    return _said(tight[0][1], tight[0][0]) if tight else None


def _said(folder: Path, left: int | None) -> str:
    return f"the disk holding {folder} is full" + ("" if left is None else f" ({left:,} bytes free)")


def full(err: BaseException | str, *folders: str | Path) -> str | None:
    """"the disk holding <folder> is full (<n> bytes free)" where `err`, from writing under one of `folders`,
    comes of a full disk (the folder with the least space free is named), else None."""
    text = str(err)
    said = getattr(err, "errno", None) in _FULL_ERRNOS or any(w in text for w in _FULL_WORDS)
    if not (folders and (said or any(w in text for w in _IO_WORDS))):
        return None
    free = {Path(f): free_bytes(f) for f in folders}
    folder = min(free, key=lambda f: float("inf") if free[f] is None else free[f])
    left = free[folder]
    if not said and (left is None or left >= LOW_BYTES):
        return None
    return _said(folder, left)

"""The suite's folder a measuring service runs from, and whether that folder is still there.

A service outlives the trial that started it (client.py), so its checkout can be replaced under it:
deleted and laid again at the same path (a fresh copy, an unpacked archive, `rsync --delete-after`),
within the idle time.  Files copied with their modification times keep the code version, and so the
address, the same, and the next trials reached the old service, whose workers then ran from a
folder that no longer existed: a new worker could not start, and every build of that command failed
with "[Errno 2] No such file or directory" until the service idled out.  The service holds its folder
open, so the folder's inode cannot be given to another file while it runs, and compares it with what
the path names now: a different folder, or none, means that the service must give way to a new one.
"""
from __future__ import annotations

import os
from pathlib import Path


class Checkout:
    """The folder at `root` as it was when the service started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by workers (PEP 446)

    def replaced(self) -> bool:
        """Whether `root` no longer names the folder this service started from (gone, or another one)."""
        try:
            return not os.path.samestat(os.fstat(self._fd), os.stat(self.root))
        except FileNotFoundError:
            return True

    def close(self) -> None:
        os.close(self._fd)

"""A write that failed because the disk is full says so, naming the folder and the bytes left."""
import errno
import sqlite3
from collections import namedtuple
from pathlib import Path

import pytest

from trial import diskfull
from trial.measure import Options, measure
from trial.records import Records
from trial.records.store import RecordsError
from trial.results import MeasureResult
from trial.workload import parse

Usage = namedtuple("Usage", "total used free")


def enospc():
    """A real "No space left on device": a write to /dev/full."""
    try:
        with open("/dev/full", "wb", buffering=0) as full:
            full.write(b"x")
    except OSError as err:
        return err
    raise AssertionError("/dev/full took a write")


def test_no_space_is_a_full_disk_named_by_its_folder(tmp_path):
    err = enospc()
    assert err.errno == errno.ENOSPC
    said = diskfull.full(err, tmp_path)
    assert said.startswith(f"the disk holding {tmp_path} is full (") and said.endswith(" bytes free)")


def test_an_io_error_is_a_full_disk_only_where_the_disk_has_little_left(tmp_path, monkeypatch):
    err = sqlite3.OperationalError("disk I/O error")
    assert diskfull.full(err, tmp_path) is None  # this disk has room: a failing disk is not called full
    monkeypatch.setattr(diskfull.shutil, "disk_usage", lambda path: Usage(1 << 30, (1 << 30) - 4096, 4096))
    assert diskfull.full(err, tmp_path) == f"the disk holding {tmp_path} is full (4,096 bytes free)"
    assert diskfull.full(ValueError("bad knob"), tmp_path) is None


def test_a_full_disk_under_the_records_store_says_so(tmp_path, monkeypatch):
    """SQLite in WAL mode reads a full disk as "disk I/O error" (its shared-memory file cannot grow), as
    seen on a full tmpfs; the store says what the cause is."""
    store = Records(tmp_path / "records.sqlite")
    connect = sqlite3.connect

    class FullDisk:
        def __init__(self, db):
            self.db = db

        def __getattr__(self, name):
            return getattr(self.db, name)

        def execute(self, sql, *args):
            if sql.startswith("INSERT"):
                raise sqlite3.OperationalError("disk I/O error")
            return self.db.execute(sql, *args)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.db.__exit__(*exc)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: FullDisk(connect(*a, **k)))
    monkeypatch.setattr(diskfull.shutil, "disk_usage", lambda path: Usage(1 << 30, 1 << 30, 0))
    with pytest.raises(RecordsError, match=rf"records store .*: the disk holding {tmp_path} is full \(0 bytes free\)"):
        store.append(parse("mm", "N16K16M16"), MeasureResult("ok", params={}, gflops=1.0))


def test_a_link_that_finds_the_disk_full_says_so(tmp_path):
    """The linker writes the library to a file that takes no byte (/dev/full): a real "final link failed: No
    space left on device", which the build reports as the disk being full."""
    (tmp_path / "kernel.so").symlink_to("/dev/full")
    result = measure(parse("mm", "N16K16M16"), None, Options(target="llvm", min_repeat_ms=1), keep=tmp_path)
    assert result.status == "compile_error"
    assert result.reason.startswith(f"the disk holding {tmp_path} is full (") and "No space left on device" in result.reason


def test_a_build_worker_that_died_blames_a_disk_only_where_one_is_nearly_full(tmp_path, monkeypatch):
    """LLVM exits its process when it cannot write ("LLVM ERROR: IO failure on output stream: No space left on
    device", seen with $TMPDIR on a full tmpfs), so the service can only look at the disks the build writes to."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    assert str(tmp_path / "tmp") in diskfull.temp_folders()
    assert diskfull.low(tmp_path, *diskfull.temp_folders()) is None
    free = {str(tmp_path): 1 << 30}
    monkeypatch.setattr(diskfull.shutil, "disk_usage", lambda path: Usage(1 << 30, 0, free.get(str(path), 512)))
    assert diskfull.low(tmp_path, tmp_path / "tmp") == f"the disk holding {tmp_path / 'tmp'} is full (512 bytes free)"

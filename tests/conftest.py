import fnmatch
import os
from multiprocessing.connection import Client
from pathlib import Path

import pytest


def _service_keys(folder):
    """The services' key files under `folder`.  os.walk, not Path.rglob: a service that stops removes its
    work folder, and rglob fails on a folder that vanishes while it scans (seen in a full run)."""
    for root, _, files in os.walk(folder):
        for name in fnmatch.filter(files, "service-*.key"):
            yield Path(root) / name


def stop_services(folder):
    """Stop every measuring service whose socket lies under `folder` (each test's services live there)."""
    for key_file in _service_keys(folder):
        try:
            with Client(str(key_file.with_suffix(".sock")), family="AF_UNIX", authkey=key_file.read_bytes()) as conn:
                conn.send({"request": "stop"})
                conn.recv()
        except (OSError, EOFError):
            pass  # gone already


@pytest.fixture(scope="session", autouse=True)
def _session_locks(tmp_path_factory):
    """The session's lock folder (device locks, cached device descriptions, the measuring service): one
    for the whole session, on purpose: tests that measure share the devices and one measuring service, as
    trials do.  Every service a test started is stopped when the session ends."""
    base = tmp_path_factory.getbasetemp()
    yield str(base / "locks")
    stop_services(base)


@pytest.fixture(autouse=True)
def _private_state(_session_locks, tmp_path, monkeypatch):
    """Each test gets its own empty records store, under its tmp_path, so no test sees what another
    recorded; none of them ever touches the user's own lock folder or store."""
    monkeypatch.setenv("OPEVO_LOCK_DIR", _session_locks)
    monkeypatch.setenv("OPEVO_RECORDS", str(tmp_path / "records" / "records.sqlite"))


@pytest.fixture
def private_service(tmp_path, monkeypatch):
    """A lock folder, and so a measuring service, of the test's own; the service is stopped afterwards."""
    locks = tmp_path / "locks"
    monkeypatch.setenv("OPEVO_LOCK_DIR", str(locks))
    yield locks
    stop_services(locks)


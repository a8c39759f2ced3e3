"""How a process reaches this machine's measuring service (trial/service/), starting it when none runs.

A service serves one environment: one user, Python environment, suite checkout and code version, and one
set of visible devices and TVM settings (`address` hashes them), so two experiments of the same
environment share one service and its warm workers, and a trial never reaches a service that runs
other code.  The service listens on a Unix socket in the lock folder ($OPEVO_LOCK_DIR); requests
and answers are pickled over `multiprocessing.connection`, authenticated with a key that only the
user can read.  The first request starts the service (`python -m trial.service serve`, in a session
of its own, so it outlives the trial that started it); it exits when idle (`IDLE_S`).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..devicelock import lock_dir

ROOT = Path(__file__).resolve().parents[2]
IDLE_ENV = "OPEVO_SERVICE_IDLE_S"
IDLE_S = 300.0
"""Seconds without a request after which the service exits (default; $OPEVO_SERVICE_IDLE_S)."""
START_TIMEOUT_S = 60.0
_KEYED_ENV = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "PYTHONPATH")
_CODE = ("trial", "tuners", "searchspace")


class ServiceError(RuntimeError):
    """The measuring service could not be started or ended before answering."""


@dataclass(frozen=True)
class Address:
    """Where one environment's service lives: its socket, key, log and scratch folder."""

    key: str
    socket: str
    key_file: Path
    log: Path
    workdir: Path

    @property
    def start_lock(self) -> Path:
        return self.key_file.with_suffix(".start.lock")


def _code_version() -> str:
    """The suite's code as it is now (names, sizes, modification times): edited code gets a new service."""
    lines = []
    for path in sorted(p for folder in _CODE for p in (ROOT / folder).rglob("*.py")):
        try:
            stat = path.stat()
        except FileNotFoundError:  # removed since the listing: a checkout or a sync is under way
            continue
        lines.append(f"{path.relative_to(ROOT)}:{stat.st_size}:{stat.st_mtime_ns}")
    return "\n".join(lines)


def address() -> Address:
    """The address of the service for this process's environment."""
    parts = [sys.prefix, sys.version, str(ROOT), str(os.getuid()), _code_version(),
             *(f"{k}={os.environ.get(k, '')}" for k in _KEYED_ENV),
             *sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("TVM_"))]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    base = lock_dir() / f"service-{key}"
    socket = f"{base}.sock"
    if len(socket) > 100:  # the limit of a Unix socket's path is 107 bytes
        socket = str(Path(tempfile.gettempdir()) / f"opevo-service-{key}.sock")
    return Address(key, socket, base.with_suffix(".key"), base.with_suffix(".log"), base.with_suffix(".d"))


def _connect(addr: Address) -> Connection | None:
    try:
        return Client(addr.socket, family="AF_UNIX", authkey=addr.key_file.read_bytes())
    except (OSError, EOFError):  # no service, a stale socket, or one that is shutting down
        return None


def _log_tail(addr: Address, lines: int = 15) -> str:
    try:
        return "\n".join(addr.log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(addr: Address) -> Connection:
    """Start the service (unless another process just did) and connect to it."""
    with FileLock(str(addr.start_lock)):
        conn = _connect(addr)
        if conn is not None:
            return conn
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        with open(addr.log, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "trial.service", "serve", "--socket", addr.socket,
                                     "--key-file", str(addr.key_file), "--workdir", str(addr.workdir)],
                                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServiceError(f"the measuring service exited with code {proc.returncode} at start; "
                                   f"its log {addr.log} ends:\n{_log_tail(addr)}")
            conn = _connect(addr)
            if conn is not None:
                return conn
            time.sleep(0.05)
        proc.kill()
        raise ServiceError(f"the measuring service did not answer within {START_TIMEOUT_S:g} s; its log "
                           f"{addr.log} ends:\n{_log_tail(addr)}")


def request(message: dict[str, Any], start: bool = True, attempts: int = 2) -> Any:
    """Send one request and wait for its answer, starting the service if none runs (unless not `start`).

    A service that ends before answering (killed, or exiting when idle just as the request came) is
    started again and the request sent again, up to `attempts` times in all; then ServiceError.
    Without `start`, None where no service runs.
    """
    addr = address()
    for _ in range(attempts):
        conn = _connect(addr)
        if conn is None:
            if not start:
                return None
            conn = _start(addr)
        try:
            conn.send(message)
            return conn.recv()
        except (EOFError, OSError):
            continue
        finally:
            conn.close()
    raise ServiceError(f"the measuring service ended before answering, {attempts} times; its log "
                       f"{addr.log} ends:\n{_log_tail(addr)}")

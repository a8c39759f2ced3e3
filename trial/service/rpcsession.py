"""A runner worker's session with one rpc_server, requested from TVM's RPC tracker (`rpc://HOST:PORT/KEY`).

Each runner worker of an RPC runner holds one session, so a server serves one runner and several
servers under one key share the trials, as the devices of this machine do.  A server serves one
session at a time, so the session is held only while measurements keep coming (the server's process
and its device context stay warm): after $OPEVO_RPC_IDLE_S seconds without one (default 30) it is
closed and the server goes back to the tracker for other experiments and users.  A run that fails
drops the session with its worker; the worker that replaces it asks the tracker for a server again.

A workload's inputs and unwritten output, and the kernel that gathers its checked outputs, go to the
server once per session and stay there (kept.py: 316 MB of inputs for the 11x11 conv).
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tvm import rpc

from ..remote import RpcAddress, rpc_address
from ..target import TargetError
from . import kept

CONNECT_TIMEOUT_S = 10.0
IDLE_ENV = "OPEVO_RPC_IDLE_S"
IDLE_S = 30.0
_SESSIONS: dict[str, Any] = {}  # the runner this worker serves -> its session
_last_use = time.monotonic()
_using = threading.Lock()  # held while a session is in use; the idle watch closes sessions only without it


def servers(address: RpcAddress) -> tuple[int, int]:
    """How many rpc_servers are registered under the key now, and how many of them are free; TargetError
    if no tracker answers."""
    try:
        socket.create_connection((address.host, address.port), timeout=CONNECT_TIMEOUT_S).close()
        tracker = rpc.connect_tracker(address.host, address.port)
        summary = tracker.summary()
        tracker.close()
    except (OSError, RuntimeError) as err:
        raise TargetError(f"no RPC tracker answers at {address.host}:{address.port} ({err}); start one with "
                          f"`python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port {address.port}`") from None
    registered = sum(1 for server in summary["server_info"] if server.get("key") == f"server:{address.key}")
    return registered, summary["queue_info"].get(address.key, {}).get("free", 0)


def _watch_idle(idle_s: float) -> None:
    while True:
        time.sleep(min(1.0, idle_s))
        with _using:
            if _SESSIONS and time.monotonic() - _last_use > idle_s:
                for runner in _SESSIONS:
                    kept.forget(runner)  # tensors on the server hold its session too
                _SESSIONS.clear()  # the last reference: the connection closes, the server is free again


@contextmanager
def session(runner: str, wait: bool = True) -> Iterator[Any]:
    """This worker's session with a server of `runner`, held for the duration of the `with`; requested
    where there is none, waiting for a free server unless `wait` is false (then TargetError if none is free)."""
    global _last_use
    with _using:
        if runner not in _SESSIONS:
            address = rpc_address(runner)
            registered, free = servers(address)
            if registered == 0:
                raise TargetError(f"no rpc_server is registered under key {address.key!r} at the tracker "
                                  f"{address.host}:{address.port}; start one with `python -m tvm.exec.rpc_server "
                                  f"--tracker {address.host}:{address.port} --key {address.key}`")
            if free == 0 and not wait:
                raise TargetError(f"all {registered} rpc_servers under key {address.key!r} are busy")
            tracker = rpc.connect_tracker(address.host, address.port)
            _SESSIONS[runner] = tracker.request(address.key, priority=1, session_timeout=0, max_retry=1)
            tracker.close()
        try:
            yield _SESSIONS[runner]
        finally:
            _last_use = time.monotonic()


@contextmanager
def loaded(runner: str, path: str, device_type: str) -> Iterator[tuple[Any, Any]]:
    """The library at `path` loaded on the server (`module`), with the server's device 0 of that type."""
    with session(runner) as remote:
        yield module(runner, path), remote.device(device_type, 0)


def module(runner: str, path: str) -> Any:
    """The library at `path` uploaded to the server this worker holds a session with and loaded there; the
    uploaded file is removed once loaded (the session outlives many of them)."""
    remote, name = _SESSIONS[runner], f"{uuid.uuid4().hex}.so"
    remote.upload(path, name)
    try:
        return remote.load_module(name)
    finally:
        remote.remove(name)


threading.Thread(target=_watch_idle, args=(float(os.environ.get(IDLE_ENV, IDLE_S)),), daemon=True).start()

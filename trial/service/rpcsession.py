"""A runner worker's session with one rpc_server, requested from TVM's RPC tracker (`rpc://HOST:PORT/KEY`).

Each runner worker of an RPC runner holds one session, so a server serves one runner and several
servers under one key share the trials, as the devices of this machine do.  A server serves one
session at a time, so the session is held only while measurements keep coming (the server's process
and its device context stay warm): after $OPEVO_RPC_IDLE_S seconds without one (default 30) it is
closed and the server goes back to the tracker for other experiments and users.  A run that fails
drops the session with its worker; the worker that replaces it asks the tracker for a server again.

A workload's inputs and its unwritten output go to the server once per session (316 MB of inputs for
the 11x11 conv), and each run starts from fresh copies of them made there, so a kernel that writes
where it should not cannot spoil the inputs of the next, nor find a previous run's result in its output.
"""
from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import tvm
from tvm import rpc

from ..remote import RpcAddress, rpc_address
from ..target import Target, TargetError
from ..verify import Reference
from . import rpcgather

CONNECT_TIMEOUT_S = 10.0
IDLE_ENV = "OPEVO_RPC_IDLE_S"
IDLE_S = 30.0
_SESSIONS: dict[str, Any] = {}  # the runner this worker serves -> its session
_INPUTS: dict[str, tuple[Any, list[Any], list[Any]]] = {}  # runner -> (workload key, kept inputs, working copies)
_GATHERS: dict[str, tuple[Any, Callable[[Any], np.ndarray]]] = {}  # runner -> (workload key, its sampler)
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
                _INPUTS.clear()  # tensors on the server hold its session too
                _GATHERS.clear()
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
    """The library at `path` uploaded to the server and loaded there, with the server's device 0 of that type;
    the uploaded file is removed afterwards (the session outlives many of them)."""
    with session(runner) as remote:
        name = f"{uuid.uuid4().hex}.so"
        remote.upload(path, name)
        try:
            yield remote.load_module(name), remote.device(device_type, 0)
        finally:
            remote.remove(name)


def inputs(runner: str, key: Any, arrays: Callable[[], list[np.ndarray]], dev: Any) -> list[Any]:
    """The workload's `arrays` (its inputs and unwritten output) on the server's device `dev`, fresh: copied
    there from the ones sent for `key` (made and sent now where this session has none for it; only the last
    workload's are kept)."""
    kept = _INPUTS.get(runner)
    if kept is None or kept[0] != key:
        _INPUTS.pop(runner, None)
        sent = [tvm.runtime.tensor(a, dev) for a in arrays()]
        kept = _INPUTS[runner] = (key, sent, [tvm.runtime.empty(a.shape, a.dtype, dev) for a in sent])
    for source, copy in zip(kept[1], kept[2]):
        source.copyto(copy)
    return kept[2]



def sampler(runner: str, key: Any, reference: Reference, target: Target, dev: Any) -> Callable[[Any], np.ndarray]:
    """For the workload and seed `key`: a function from a run's output on the server to its checked elements
    here (`Reference.check_sampled`), gathered on the server (rpcgather.py).  Built, sent and kept there
    the first time this session sees `key`; called inside this runner's session."""
    kept = _GATHERS.get(runner)
    if kept is None or kept[0] != key:
        _GATHERS.pop(runner, None)
        remote, positions = _SESSIONS[runner], reference.flat_indices
        name = f"{uuid.uuid4().hex}.so"
        with tempfile.TemporaryDirectory(prefix="opevo-gather-") as folder:
            remote.upload(rpcgather.library(reference.wl, len(positions), target, folder), name)
        try:
            gather = remote.load_module(name)["main"]
        finally:
            remote.remove(name)
        where = tvm.runtime.tensor(positions, dev)
        picked = tvm.runtime.empty((len(positions),), reference.wl.out_dtype, dev)

        def sample(output: Any) -> np.ndarray:
            gather(output, where, picked)
            return picked.numpy()

        kept = _GATHERS[runner] = (key, sample)
    return kept[1]

threading.Thread(target=_watch_idle, args=(float(os.environ.get(IDLE_ENV, IDLE_S)),), daemon=True).start()

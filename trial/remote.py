"""Where kernels run: `local` (this machine's devices) or `rpc://HOST:PORT/KEY`, the devices of the
`python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY` processes registered at TVM's RPC
tracker, as AutoTVM's and MetaSchedule's RPC runners reach them.

With an RPC runner the measuring service here builds for the remote device's target and exports the
library; the runner uploads it to a server, which verifies and times it (trial/service/rpcsession.py).
This module only names the runner, so that trials and tuners can carry it without importing TVM.
"""
from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

LOCAL = "local"
RUNNER_ENV = "OPEVO_RUNNER"
_RPC = re.compile(r"rpc://(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})/(?P<key>[A-Za-z0-9_.\-]{1,64})")


@dataclass(frozen=True)
class RpcAddress:
    """A tracker and the key its servers registered under."""

    host: str
    port: int
    key: str

    def __str__(self) -> str:
        return f"rpc://{self.host}:{self.port}/{self.key}"


def rpc_address(runner: str) -> RpcAddress | None:
    """The tracker of `runner` (None for `local`); ValueError naming the expected form otherwise."""
    if runner == LOCAL:
        return None
    found = _RPC.fullmatch(runner)
    if not found or not 1 <= int(found["port"]) <= 65535:
        raise ValueError(f"runner {runner!r}: expected 'local' or rpc://HOST:PORT/KEY (port 1-65535, key of "
                         f"letters, digits, '_', '.', '-'), e.g. rpc://127.0.0.1:9190/h100")
    return RpcAddress(found["host"].strip("[]"), int(found["port"]), found["key"])


def runner_arg(text: str) -> str:
    """argparse type of --runner: the runner, checked."""
    try:
        rpc_address(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_runner_argument(p: argparse.ArgumentParser) -> None:
    """The --runner option, the same in the trial, the benchmarks and the experiment writer."""
    p.add_argument("--runner", type=runner_arg, default=os.environ.get(RUNNER_ENV, LOCAL),
                   help="where kernels are verified and timed: local (default; $OPEVO_RUNNER) or "
                        "rpc://HOST:PORT/KEY, the rpc_servers registered under KEY at TVM's RPC tracker")

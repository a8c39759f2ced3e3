"""python -m trial.service: the measuring service of this environment.

    python -m trial.service status    what it is doing (JSON), or that none runs
    python -m trial.service stop      stop it now (the next measurement starts a new one)
    python -m trial.service serve ... run it (the first measurement starts it; not for use by hand)
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from . import client
from .server import serve


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trial.service", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="what the service of this environment is doing (JSON)")
    sub.add_parser("stop", help="stop the service of this environment")
    s = sub.add_parser("serve", help="run the service (trials start it; not for use by hand)")
    s.add_argument("--socket", required=True)
    s.add_argument("--key-file", type=Path, required=True)
    s.add_argument("--workdir", type=Path, required=True)
    s.add_argument("--idle", type=float, default=float(os.environ.get(client.IDLE_ENV) or client.IDLE_S))
    s.add_argument("--build-workers", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    if args.command == "serve":
        serve(args.socket, args.key_file, args.workdir, args.idle, args.build_workers)
        return 0
    answer = client.request({"request": args.command}, start=False)
    print(json.dumps(answer, indent=1) if answer is not None else "no measuring service runs for this environment")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

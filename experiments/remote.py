"""python -m experiments.remote <config.yml> --machine USER@HOST[:PORT] ... --python PATH: the same experiment
with its trials on other machines, through NNI's remote training service (`platform: remote`).

NNI copies the trial code folder (the suite's checkout, less what `.nniignore` names) to each machine
over SSH and starts trials there; each trial measures on that machine's devices through that machine's
own measuring service and runners, so every machine needs the suite installed (`make install`: its
interpreter is --python) and nothing else.  The tuner runs here, keeping the rules of the config's
`target` classArg: write the experiment for the workers' GPU (`python -m experiments.write OP SPEC
--arch sm_90`) where this machine has another one or none.

NNI 3.0 starts each trial with `bash -c` under the SSH session, and Debian's and Ubuntu's bash then
read ~/.bashrc, whose pyenv or conda set-up puts its own python first on PATH, ahead of the
machine's `pythonPath`: so the trialCommand names the interpreter by its full path instead.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from trial.command import read_trial_command
from trial.inputs import number_type

_MACHINE = re.compile(r"(?P<user>[A-Za-z0-9_.\-]+)@(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\])(?::(?P<port>\d{1,5}))?")


def machine(text: str, ssh_key: Path, python: str) -> dict[str, Any]:
    """One `machineList` entry from USER@HOST[:PORT]; ValueError naming the expected form."""
    found = _MACHINE.fullmatch(text)
    port = int(found["port"] or 22) if found else 0
    if not found or not 1 <= port <= 65535:
        raise ValueError(f"machine {text!r}: expected USER@HOST[:PORT], e.g. opevo@10.0.0.7 or opevo@gpu1:2222")
    return {"host": found["host"].strip("[]"), "port": port, "user": found["user"],
            "sshKeyFile": str(ssh_key.expanduser()), "pythonPath": str(Path(python).parent)}


def rules_device(config: dict[str, Any]) -> str:
    """What the config's tuner keeps the rules of (the suite's: their `target` classArg; NNI's built-ins:
    the twin space written for a device), in words."""
    class_args = config.get("tuner", {}).get("classArgs", {})
    if "target" not in class_args:
        return "the device its search_space_twin.json was written for"
    target = class_args["target"]
    if isinstance(target, dict):
        return f"{target.get('device_name', '?')} ({target.get('kind', '?')})"
    return "each trial's own device (target auto)" if target == "auto" else f"architecture {target}"


def remote_config(config: dict[str, Any], machines: list[dict[str, Any]], python: str,
                  manager_ip: str | None = None) -> dict[str, Any]:
    """`config` (a suite experiment's) with its trials on `machines`, run by the interpreter `python` there."""
    command = config.get("trialCommand", "")
    if read_trial_command(command) is None:
        raise ValueError(f"not a suite experiment: its trialCommand is {command!r}")
    out = {**config, "trialCommand": re.sub(r"^\S+(?= -m trial )", python, command),
           "trainingService": {"platform": "remote", "machineList": machines}}
    if manager_ip:
        out["nniManagerIp"] = manager_ip  # where the machines reach this one's NNI manager
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.remote", description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path, help="a suite experiment config, e.g. experiments/mm/N512K1024M1024/config_opevo.yml")
    p.add_argument("--machine", action="append", required=True, help="USER@HOST[:PORT], once per machine")
    p.add_argument("--ssh-key", type=Path, default=Path("~/.ssh/id_ed25519"), help="private key (default ~/.ssh/id_ed25519)")
    p.add_argument("--python", required=True,
                   help="full path of the suite's interpreter on the machines, e.g. /opt/opevo/.venv/bin/python")
    p.add_argument("--manager-ip", help="this machine's address as the machines reach it (NNI's nniManagerIp)")
    p.add_argument("--concurrency", type=number_type(int, 1, 1024), help="trialConcurrency (default: the config's)")
    args = p.parse_args(argv)
    if not args.python.startswith("/"):
        p.error(f"--python must be a full path, got {args.python!r}")
    try:
        config = yaml.safe_load(args.config.read_text())
        machines = [machine(m, args.ssh_key, args.python) for m in args.machine]
        remote = remote_config(config, machines, args.python, args.manager_ip)
    except (OSError, yaml.YAMLError, ValueError, AttributeError) as err:
        p.error(str(err))
    if args.concurrency:
        remote["trialConcurrency"] = args.concurrency
    out = args.config.with_name(f"{args.config.stem}_remote.yml")  # beside it: its relative paths hold
    out.write_text(f"# Written by `python -m experiments.remote {args.config.name}`: trials on "
                   f"{', '.join(args.machine)}.\n" + yaml.safe_dump(remote, sort_keys=False))
    print(out)
    print(f"the tuner keeps the rules of {rules_device(config)}; if the machines have another device, write "
          "the experiment for theirs first (python -m experiments.write OP SPEC --arch ARCH)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

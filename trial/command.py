"""The trialCommand of a suite experiment: `python3 -m trial <op> <spec> --tuner <tuner> [--runner <runner>]`.

Written into every generated config and read back from NNI's records of an experiment (records
import, `make tune`'s check for a tuned kernel), so its format lives in one place.
"""
from __future__ import annotations

import re

from .remote import LOCAL
from .workload import Workload

_COMMAND = re.compile(r"-m trial (?P<op>\S+) (?P<spec>\S+)(?: --tuner (?P<tuner>\S+))?")


def trial_command(wl: Workload, tuner: str, runner: str = LOCAL) -> str:
    """The experiment's trialCommand; `read_trial_command` reads it back (records import, make tune)."""
    return f"python3 -m trial {wl.op} {wl.spec} --tuner {tuner}" + ("" if runner == LOCAL else f" --runner {runner}")


def read_trial_command(command: str) -> tuple[str, str, str | None] | None:
    """(op, spec, tuner or None) of a suite trialCommand, or None for another command."""
    found = _COMMAND.search(command)
    return (found["op"], found["spec"], found["tuner"]) if found else None


def trial_runner(command: str) -> str:
    """The `--runner` of a suite trialCommand (trial/remote.py), LOCAL where it gives none."""
    found = re.search(r"--runner (\S+)", command)
    return found[1] if found else LOCAL

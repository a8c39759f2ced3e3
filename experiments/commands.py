"""Commands printed for the user to paste, in a form that runs from the shell they are in.

The suite's programs live in the virtual environment that runs this process (`make install`'s .venv),
which the user's shell need not have activated: `nnictl` alone fails there with "command not found".
So each command names the environment's own executable, by a path relative to the current folder where
it lies below it (`.venv/bin/nnictl`), else by its absolute path.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def shell_path(path: Path) -> str:
    """`path` as typed in a shell in the current folder: relative below it (with a slash), else absolute."""
    relative = os.path.relpath(path)
    text = str(path) if relative.startswith("..") else relative if os.sep in relative else f".{os.sep}{relative}"
    return shlex.quote(text)


def python() -> str:
    """This interpreter (the environment's `python`, not the file it links to)."""
    return shell_path(Path(sys.executable).absolute())


def nnictl() -> str:
    """This environment's nnictl: its script where installed beside the interpreter, else the module."""
    script = Path(sys.executable).absolute().parent / "nnictl"
    return shell_path(script) if script.is_file() else f"{python()} -m nni.tools.nnictl.nnictl"


def stop(exp_id: str) -> str:
    return f"{nnictl()} stop {shlex.quote(exp_id)}"


def export(workload: str) -> str:
    """Export the best recorded kernel of `workload` (op/spec) on this machine's device."""
    return f"{python()} -m trial.records export {shlex.quote(workload)}"

"""Small CPU experiments for the end-to-end tests: a generated config under tmp_path, a free port,
and an experiment that is stopped afterwards whatever happens."""
import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import yaml

from experiments import tune, write
from trial.remote import LOCAL
from trial.workload import parse_name


LISTEN_PORTS = range(20000, 32000)
"""Where the tests' NNI managers listen: below Linux's ephemeral range (32768-60999 by default), whose ports
outgoing connections take as their own (the tests' REST polls among them), so that a manager's listen never
finds its port held by one (EADDRINUSE), as a user's --port 8080 does not."""


def free_port(span: int = 8) -> int:
    """A port of LISTEN_PORTS free for listening, and the `span` - 1 after it (a model's live experiments take
    one each, from the given port up), drawn at random so that tests do not meet one another's ports."""
    draw = random.Random()
    for _ in range(1000):
        port = draw.randrange(LISTEN_PORTS.start, LISTEN_PORTS.stop - span)
        if all(_bindable(p) for p in range(port, port + span)):
            return port
    raise RuntimeError(f"no {span} free ports in a row in {LISTEN_PORTS}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def write_config(tmp_path: Path, workload: str, tuner: str, trials: int, concurrency: int = 2,
                 seed: int | None = None, warm_start: bool = False, runner: str = LOCAL) -> Path:
    """The generated config of `tuner` for `workload`, with NNI's files kept under tmp_path/nni.

    Warm start from the records store (the suite's tuners) is off unless asked for, so an experiment
    runs its own search.
    """
    folder = write.write(parse_name(workload), tmp_path / "experiments", max_trials=trials,
                         concurrency=concurrency, warm_start=warm_start, runner=runner)
    path = folder / f"config_{tuner}.yml"
    config = yaml.safe_load(path.read_text())
    config["experimentWorkingDirectory"] = str(tmp_path / "nni")
    if seed is not None:
        config["tuner"]["classArgs"]["seed"] = seed
    path.write_text(yaml.safe_dump(config))
    return path


def log_tail(config: Path, exp_id: str, lines: int = 30) -> str:
    """The end of an experiment's manager and dispatcher logs, for the message of a failed assertion."""
    folder = Path(yaml.safe_load(config.read_text())["experimentWorkingDirectory"]) / exp_id / "log"
    tails = []
    for name in ("nnimanager.log", "dispatcher.log"):
        log = folder / name
        text = [line[:300] for line in log.read_text(errors="replace").splitlines()[-lines:]] if log.exists() \
            else ["(missing)"]
        tails.append("\n".join([f"--- {log}", *text]))
    return "\n".join(tails)


@contextmanager
def running(config: Path, port: int) -> Iterator[str]:
    """`nnictl create` the experiment; yields its id; stops it (by port if no id came back)."""
    exp_id = None
    try:
        exp_id = tune.create(config, port)
        yield exp_id
    finally:
        if exp_id:
            tune.nnictl("stop", exp_id, check=False)
        else:
            tune.nnictl("stop", "--port", str(port), check=False)


def managers(exp_ids) -> dict[str, int]:
    """{experiment id: pid} of the NNI managers alive for `exp_ids`: node processes running NNI's main.js
    with the id on their command line (what runs, not what nnictl's registry remembers)."""
    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(arg.endswith("main.js") for arg in cmdline):
            for exp_id in exp_ids:
                if exp_id and exp_id in cmdline:
                    found[exp_id] = proc.info["pid"]
    return found

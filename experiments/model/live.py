"""The live NNI experiments of a model's tuning: a task's experiment keeps running between its rounds.

Restarting an experiment for each round (`nnictl resume`: NNI's Node manager, then the dispatcher with
the tuner, which imports TVM and reads the records) costs about 23 s a round on an H200, whatever the
round's size.  So a task's experiment is started once (create or resume) and left running after its
round; its next round only raises its budget (rounds.py).  Each live experiment holds a web-UI port of
its own, from the `port` given upwards; at most `live_bound()` run at once (8 to 32, by free memory),
and a new one past that bound first stops the least recently used (a stopped experiment is resumed at
its next round, with its trials and its tuner's checkpoint, so nothing is lost).  `close` stops every
experiment the pool started or resumed: `tune` calls it on every way out (the end, the budget or time
spent, Ctrl-C, an exception).

An experiment that finished its budget (status DONE) has handed out all its trial requests: NNI 3.0's
manager asks the tuner for trials only at the start and as trials end (nnimanager.js `manageTrials`), so
a raised budget alone leaves it RUNNING with no trial for good.  `raise_budget` therefore also raises
trialConcurrency by the experiment's own concurrency, which makes the manager ask for that many trials
at once (`updateTrialConcurrency`'s change is requested on its next loop); the value the manager keeps
grows by that much each round and is set back before the experiment is stopped, so a resume asks for
the configured number.  Lowering it between rounds instead would cancel the next round's requests.
"""
from __future__ import annotations

import socket
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil

from .. import manager

MAX_LIVE = 8
"""Experiments running at once where memory is short: each is a Node manager and a Python dispatcher
holding the tuner (about 250 MB together, 78 + 173 MB measured with OpEvo, and a little CPU for their
polls); 8 covers the heaviest tasks of a model, which get most rounds, and the rest wait stopped,
resumed when picked (a resume costs seconds of NNI's start, the tuner's imports and its records)."""
MAX_LIVE_CEILING = 32  # ... and where memory is plenty: every task of ResNet-50 (24) stays live
LIVE_MEMORY = 1 << 30  # free memory set aside per live experiment: four times the 250 MB measured


def live_bound() -> int:
    """How many experiments may run at once here: one per `LIVE_MEMORY` of free memory, at least
    `MAX_LIVE`, at most `MAX_LIVE_CEILING`."""
    return max(MAX_LIVE, min(MAX_LIVE_CEILING, psutil.virtual_memory().available // LIVE_MEMORY))


@dataclass
class Live:
    port: int  # its web UI and REST API
    concurrency: int  # its configured trialConcurrency


def idle(port: int) -> bool:
    """Whether nothing listens on `port` (NNI's own check before it starts a manager, launcher.py)."""
    with socket.socket() as s:
        return s.connect_ex(("localhost", port)) != 0


class LivePool:
    """The experiments left running, least recently used first, on ports `port` .. `port + limit - 1`."""

    def __init__(self, port: int, limit: int | None = None, say: Callable[[str], None] = print) -> None:
        limit = live_bound() if limit is None else limit
        if limit < 1:
            raise ValueError(f"the bound on live experiments must be at least 1, not {limit}")
        self.first, self.limit, self.say = port, limit, say
        self.live: OrderedDict[str, Live] = OrderedDict()

    def get(self, exp_id: str) -> Live | None:
        """The live experiment `exp_id`, now the most recently used; None if it is not running here."""
        found = self.live.get(exp_id)
        if found is not None:
            self.live.move_to_end(exp_id)
        return found

    def port(self) -> int:
        """A port for an experiment about to start: the least recently used one is stopped if the bound
        is reached; a port something else listens on (another user's experiment) is passed over."""
        if len(self.live) >= self.limit:
            self.stop(next(iter(self.live)), why="least recently used; resumed at its next round")
        held = {live.port for live in self.live.values()}
        for port in range(self.first, self.first + self.limit):
            if port not in held and idle(port):
                return port
        raise RuntimeError(f"no idle web-UI port in {self.first}-{self.first + self.limit - 1} for another "
                           "experiment: give tune another --port")

    def add(self, exp_id: str, port: int, name: str) -> None:
        """`exp_id` now runs on `port` (created or resumed by the caller)."""
        concurrency = manager.profile(port, exp_id)["params"]["trialConcurrency"]
        self.live[exp_id] = Live(port, concurrency)
        self.say(f"{name}: experiment {exp_id} running, web UI http://127.0.0.1:{port} "
                 f"({len(self.live)} of at most {self.limit} live)")

    def raise_budget(self, exp_id: str, upto: int) -> None:
        """Let the live `exp_id` run until it holds `upto` trials, with its trials in flight again."""
        live = self.live[exp_id]
        found = manager.profile(live.port, exp_id)
        manager.put(live.port, found, {"maxTrialNumber": upto,
                                       "trialConcurrency": found["params"]["trialConcurrency"] + live.concurrency})

    def stop(self, exp_id: str, why: str = "") -> None:
        """Stop `exp_id` (best effort: a manager that is gone already is no error) and forget it."""
        live = self.live.pop(exp_id, None)
        if live is not None:
            try:  # the configured concurrency back, for a resume
                manager.update(live.port, exp_id, "trialConcurrency", live.concurrency)
            except (OSError, RuntimeError, ValueError):
                pass  # not answering: its last stored profile stands
        manager.nnictl("stop", exp_id, check=False)
        if live is not None and why:
            self.say(f"stopped experiment {exp_id} on port {live.port} ({why})")

    def close(self) -> None:
        """Stop every live experiment, all at once (a manager takes seconds to shut down: 8 one after the
        other would add a minute to the run's end), each whatever happens to the others."""
        def stop(exp_id: str) -> None:
            try:
                self.stop(exp_id)
            except Exception:  # noqa: BLE001 - the others must still be stopped
                self.live.pop(exp_id, None)

        with ThreadPoolExecutor(max_workers=max(len(self.live), 1)) as threads:
            list(threads.map(stop, list(self.live)))

    def __enter__(self) -> LivePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def running(experiments: list[str]) -> dict[str, int]:
    """{id: web-UI port} of those of `experiments` whose NNI manager is alive, by NNI's record of
    nnictl's experiments (its status there stays RUNNING for a manager killed with its run, so the
    process itself is checked)."""
    from nni.tools.nnictl.config_utils import Experiments

    known = Experiments().get_all_experiments()
    alive = {}
    for exp_id in experiments:
        info = known.get(exp_id)
        pid = info.get("pid") if isinstance(info, dict) else None
        if pid and info.get("status") != "STOPPED" and psutil.pid_exists(pid):
            alive[exp_id] = info.get("port")
    return alive


def stop_left_over(experiments: list[str], concurrency: int) -> list[str]:
    """Stop those of `experiments` that still run: managers a killed `tune` left (SIGKILL runs no
    `close`), which would hold their ports and CPU; each gets its trialConcurrency `concurrency` back
    first (a live one's grows round by round), so its resume asks for that many trials.  Returns the
    ids stopped."""
    found = running(experiments)
    for exp_id, port in found.items():
        try:
            manager.update(port, exp_id, "trialConcurrency", concurrency)  # checks the port serves exp_id
        except (OSError, RuntimeError, ValueError, TypeError):
            pass  # not answering, or the port is another's now: its stored profile stands
        manager.nnictl("stop", exp_id, check=False)
    return list(found)

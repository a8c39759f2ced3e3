"""One round of a task's tuning: its NNI experiment run with nnictl up to a number of trials, left running.

Each task has one NNI experiment for all its rounds (so the web UI shows one experiment per task, with
every trial it ran): the first round `nnictl create`s it with maxTrialNumber = the round's trials; a
later round raises its budget (NNI counts the trials the experiment holds, so the new value is the
total after this round) and waits until it holds that many.  Between rounds the experiment stays
running (live.py: a restart costs NNI's manager and the tuner's dispatcher, about 23 s a round on an
H200), on a web-UI port of its own; one that the bound on live experiments stopped, or that a finished
or killed run left, is `nnictl resume`d first.  The tuner (OpEvo) saves its state in the experiment's
checkpoint folder and picks it up on resume (tuners/state.py), so the search goes on where it stopped.
A round that ends short of its trials (time up, nothing more to propose) or fails stops its experiment.

The experiment's own count is the truth about trials spent: a round cut short by a kill is finished
by resuming the same experiment to the same total, and only the trials it lacks are run.  The trials
keep every measurement in the records store, the knowledge base of later runs.

The configs are experiments/write.py's, with the suite's OpEvo tuner warm-starting from the records
and trialConcurrency `write.auto_concurrency(target)`: the measuring service spreads one experiment's
kernels over every GPU of the host, so the trials in flight are enough for all of them (OpEvo's
offspring_size is raised to match by the writer); tune.py sizes the rounds from it.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from trial.workload import Workload

from .. import manager, write
from ..registry import CONCURRENCY
from .live import LivePool

TUNER = "opevo"
PICKUP_S = 120.0
"""How long a resumed experiment may report DONE before NNI's manager loop sees the raised budget."""


@dataclass(frozen=True)
class RoundResult:
    experiment: str
    trials: int  # trials the task's experiment holds now
    gflops: float | None  # its best verified kernel, if any
    latency_ms: float | None


Started = Callable[[str], None]
"""Called with the experiment id as soon as it exists, so the manifest keeps it before any trial runs."""


class NniRounds:
    """Runs rounds of the tasks' experiments under `out`, left running in `pool` (live.py) between rounds;
    the experiments are written with trialConcurrency `concurrency`."""

    def __init__(self, out: Path, pool: LivePool, concurrency: int = CONCURRENCY) -> None:
        self.out, self.pool, self.concurrency = out, pool, concurrency

    def config(self, wl: Workload) -> Path:
        return write.folder(wl, self.out / "experiments") / f"config_{TUNER}.yml"

    def prepare(self, wl: Workload, trials: int) -> Path:
        """Write the task's experiment folder (experiments/write.py) with NNI's files under out/nni."""
        write.write(wl, self.out / "experiments", max_trials=trials, concurrency=self.concurrency)
        return self._edit(wl, trials)

    def _edit(self, wl: Workload, trials: int) -> Path:
        path = self.config(wl)
        text = path.read_text()
        header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
        config = yaml.safe_load(text)
        config["maxTrialNumber"] = trials
        config["experimentWorkingDirectory"] = str((self.out / "nni").resolve())
        path.write_text(header + yaml.safe_dump(config, sort_keys=False))
        return path

    def __call__(self, wl: Workload, experiment: str | None, upto: int, timeout_s: float,
                 started: Started) -> RoundResult:
        """Run `wl`'s experiment until it holds `upto` trials (or `timeout_s` passes); it is left running
        if it got there, stopped otherwise."""
        live = None if experiment is None else self.pool.get(experiment)
        fresh = live is None
        try:  # whatever fails once the experiment has an id, it is stopped
            if live is None:
                port = self.pool.port()
                if experiment is None:
                    config = self._edit(wl, upto) if self.config(wl).exists() else self.prepare(wl, upto)
                    experiment = manager.create(config, port)
                    started(experiment)
                else:
                    manager.nnictl("stop", experiment, check=False)  # still running if a killed run left it so
                    manager.resume(experiment, port)
                self.pool.add(experiment, port, wl.name)
                live = self.pool.get(experiment)
            held = len(manager.trials(live.port))
            if held < upto:
                if fresh:  # just created or resumed: it asks the tuner for its trials as it starts
                    manager.update(live.port, experiment, "maxTrialNumber", upto)
                else:  # live since its last round, which answered all its requests
                    self.pool.raise_budget(experiment, upto)
                if self._picked_up(live.port, held, timeout_s):
                    manager.wait(live.port, timeout_s, poll_s=2)
            records = manager.trials(live.port)
        except BaseException:
            if experiment is not None:
                self.pool.stop(experiment)
            raise
        if len(records) < upto:
            self.pool.stop(experiment, why=f"{len(records)} of {upto} trials: the round ended short")
        top = manager.best(records)
        return RoundResult(experiment, len(records), top.metric["gflops"] if top else None,
                           top.metric["latency_ms"] if top else None)

    @staticmethod
    def _picked_up(port: int, held: int, timeout_s: float) -> bool:
        """Whether the experiment took up the raised budget: it reports DONE until NNI's manager loop sees
        it; False if it never does (nothing more to propose, or time is up)."""
        deadline = time.monotonic() + min(PICKUP_S, timeout_s)
        while manager.status(port) in ("DONE", "NO_MORE_TRIAL") and len(manager.trials(port)) <= held:
            if time.monotonic() > deadline:
                return False
            time.sleep(1)
        return True

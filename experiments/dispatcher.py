"""NNI 3.0's dispatcher and manager around one tuner, played in this process.

The benchmark driver (benchmarks/driver.py) and the tuners' tests drive tuners through it, so both
call a tuner exactly as an nnictl experiment does: fresh parameter ids, requests answered now or later
through `st_callback` (NNI's `send_trial`, which queues a trial job), JSON on the way to the trial,
a final result then `trial_end` per trial. Who runs the jobs, and when, is the caller's.
"""
from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import nni
from nni.tuner import Tuner


class Dispatcher:
    """One tuner's side of an experiment: the jobs it created, in order, and the time spent inside it."""

    def __init__(self, tuner: Tuner, on_job: Callable[[int, Any], None] | None = None) -> None:
        self.tuner = tuner
        self.on_job = on_job
        """Called with each new job's id and parameters as the tuner sends them (before any JSON round trip)."""
        self.params: dict[int, Any] = {}
        self.waiting: deque[int] = deque()
        self.tuner_s = 0.0
        self._ids = itertools.count()

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            self.tuner_s += time.perf_counter() - began

    def _new_job(self, parameter_id: int, params: Any) -> None:
        if self.on_job:
            self.on_job(parameter_id, params)
        self.params[parameter_id] = params
        self.waiting.append(parameter_id)

    def start(self, search_space: dict[str, Any]) -> None:
        self._call(self.tuner.update_search_space, search_space)

    def request(self, count: int) -> int:
        """Ask for `count` trials under fresh ids, as NNI does when trials end; how many were answered now."""
        batch = [next(self._ids) for _ in range(count)]
        try:
            answered = self._call(self.tuner.generate_multiple_parameters, batch, st_callback=self._new_job)
        except nni.NoMoreTrialError:
            answered = []
        for parameter_id, params in zip(batch, answered):
            self._new_job(parameter_id, params)
        return len(answered)

    def next_job(self) -> tuple[int, Any] | None:
        """The oldest waiting job: its id and parameters as the trial receives them (through JSON)."""
        if not self.waiting:
            return None
        parameter_id = self.waiting.popleft()
        return parameter_id, json.loads(json.dumps(self.params[parameter_id]))

    def finish(self, parameter_id: int, report: Any | None, success: bool = True) -> None:
        """A trial ended: its final result (None: it reported none, as a crashed trial), then its end."""
        if report is not None:
            self._call(self.tuner.receive_trial_result, parameter_id, self.params[parameter_id],
                       json.loads(json.dumps(report)), customized=False, trial_job_id=str(parameter_id))
        self._call(self.tuner.trial_end, parameter_id, success)

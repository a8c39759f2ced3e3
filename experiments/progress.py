"""The live progress of an experiment: trials done of the budget, their statuses, the best so far, the
rate and the time left.

On a terminal it is one tqdm bar that redraws in place; elsewhere (a log file, CI) a plain line every
`interval_s` seconds, and when the state changes, so that logs stay short and readable.
"""
from __future__ import annotations

import io
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from .manager import ACTIVE, TrialRecord, best

INTERVAL_S = 30.0


def statuses(records: list[TrialRecord]) -> str:
    """The finished trials by outcome (the status each measured, "no result" for a trial that reported
    none), most common first, then how many run now: 'ok 118, compile_error 2; 4 running'."""
    counts = Counter(r.metric.get("status", "?") if r.metric else "no result"
                     for r in records if r.status not in ACTIVE)
    running = sum(r.status in ACTIVE for r in records)
    text = ", ".join(f"{name} {n}" for name, n in counts.most_common()) or "none finished"
    return f"{text}; {running} running" if running else text


def best_text(records: list[TrialRecord]) -> str:
    top = best(records)
    return f"best {top.metric['gflops']:.1f} GFLOPS" if top else "no verified kernel yet"


def duration(seconds: float) -> str:
    """'2 h 05 min', '6 min 52 s', '40 s'."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _sized(stream: TextIO) -> bool:
    """Whether `stream` writes to a terminal that knows its size."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False
    return size.columns > 0 and size.lines > 0


class Progress:
    """Called with NNI's state and the trials at each poll (`manager.wait`'s `progress`)."""

    def __init__(self, budget: int | None, stream: TextIO | None = None, interval_s: float = INTERVAL_S,
                 bar: bool | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget, self.clock = budget, clock
        self.stream = stream or sys.stdout
        self.interval_s = interval_s
        self.started = clock()
        self._last_line = -float("inf")
        self._last_state = ""
        use_bar = self.stream.isatty() if bar is None else bar
        sized = _sized(self.stream)  # a pseudo-terminal without a size reads 0 x 0, and tqdm then draws nothing
        self._bar = tqdm(total=budget, desc="tuning", unit="trial", file=self.stream, dynamic_ncols=sized,
                         ncols=None if sized else 120, nrows=None if sized else 24,
                         bar_format="{desc} {n_fmt}/{total_fmt} |{bar}| [{elapsed}<{remaining}, {rate_fmt}{postfix}]",
                         ) if use_bar else None

    def __call__(self, state: str, records: list[TrialRecord]) -> None:
        done = sum(r.status not in ACTIVE for r in records)
        detail = f"{statuses(records)}, {best_text(records)}"
        if self._bar is not None:
            self._bar.set_postfix_str(detail if state == "RUNNING" else f"{state}: {detail}", refresh=False)
            self._bar.update(max(0, done - self._bar.n))
            self._bar.refresh()
            return
        now = self.clock()
        finished = self.budget is not None and done >= self.budget
        if now - self._last_line < self.interval_s and state == self._last_state and not finished:
            return
        self._last_line, self._last_state = now, state
        of = f"/{self.budget}" if self.budget else ""
        print(f"[{time.strftime('%H:%M:%S')}] {state}: {done}{of} trials ({detail})"
              f"{self._pace(done, now)}", file=self.stream, flush=True)

    def _pace(self, done: int, now: float) -> str:
        """', 0.95 trials/s, about 6 min 52 s left', once a trial has finished."""
        elapsed = now - self.started
        if not done or elapsed <= 0:
            return ""
        rate = done / elapsed
        if not self.budget or done >= self.budget:
            return f", {rate:.2f} trials/s"
        return f", {rate:.2f} trials/s, about {duration((self.budget - done) / rate)} left"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

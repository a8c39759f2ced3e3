"""Timestamps of a trial's way from the tuner through NNI to the measurement and back.

Where $OPEVO_TIMELINE names a folder, a trial process and the suite's tuners append one JSON line per
event to a file of their own in it (`mark`); `benchmarks.nnipace` joins them with NNI's own times of each
trial job to show where an nnictl trial's time goes.  Unset, as everywhere but that benchmark, `mark`
does nothing.  Times are `time.time()` seconds, the clock NNI's manager stamps its trial jobs with.
"""
from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

ENV = "OPEVO_TIMELINE"


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def mark(event: str, at: float | None = None, **fields: Any) -> None:
    """Append `event` (now, or at `at`) with `fields` to this process's file; a failed write costs nothing."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    line = json.dumps({"event": event, "t": time.time() if at is None else at, "pid": os.getpid(), **fields})
    try:
        with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as out:
            out.write(line + "\n")
    except OSError:
        pass


def mark_process_start(event: str) -> None:
    """`event` at the time this process started (the operating system's record of it)."""
    if enabled():
        import psutil

        mark(event, at=psutil.Process().create_time())


def mark_cpu(event: str) -> None:
    """`event` with the CPU seconds (user and system) this process has used so far."""
    if enabled():
        t = os.times()
        mark(event, cpu_s=t.user + t.system)


def timed(event: str) -> Callable[[F], F]:
    """Decorate a function to `mark` `event` at each call's start with the function's name and the call's wall
    seconds (`s`) and the calling thread's CPU seconds (`cpu_s`): the tuner's calls, which NNI's dispatcher
    waits for.  Costs one check a call while timelines are off."""
    def wrap(function: F) -> F:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not enabled():
                return function(*args, **kwargs)
            start, cpu = time.time(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                mark(event, at=start, call=function.__name__, s=time.time() - start, cpu_s=time.thread_time() - cpu)
        return call  # type: ignore[return-value]
    return wrap


def read(folder: str) -> list[dict[str, Any]]:
    """Every event written under `folder`, in time order (a torn last line of a killed process is skipped)."""
    events = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as lines:
            for line in lines:
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return sorted(events, key=lambda e: e["t"])

"""out/manifest.json: a model's tuning as it stands, rewritten after every step so a killed run resumes.

It holds the tasks (workload, calls per forward, time and share in the model), the budget, and per task
the trials spent, the best verified kernel so far, its NNI experiment id, whether it came from the
records, and the scheduler's state (scheduler.Progress), plus the round in flight: a run killed
mid-round finishes that same round of that same experiment when started again, so no trial is spent
twice.  Written atomically (a temporary file renamed over the old one): a kill never leaves half a file.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .scheduler import Progress

NAME = "manifest.json"
VERSION = 1


class ManifestError(ValueError):
    """A manifest that cannot be read, or that belongs to other tasks or another device."""


@dataclass
class Entry:
    """One task of the model and what its tuning has reached."""

    workload: str  # as the task named it
    count: int
    time_ms: float  # its measured time in the model per forward (all calls)
    share: float
    progress: Progress
    key: str | None = None  # the canonical workload (trial.workload.Workload.key); None if unparsed
    skipped: str | None = None  # why it is not tuned (e.g. the suite cannot parse it)
    from_records: bool = False  # its kernel was in the records on this device: not measured
    note: str | None = None  # e.g. the records hold it only for other devices
    experiment: str | None = None  # its NNI experiment
    trials: int = 0  # trials its experiment has run
    gflops: float | None = None  # best verified kernel so far
    latency_ms: float | None = None

    @property
    def tuned(self) -> bool:
        """Whether the scheduler spends trials on it."""
        return self.skipped is None and not self.from_records


@dataclass
class Manifest:
    target: str
    device: str
    trials: int | None  # the budget: trials in all, or
    minutes: float | None  # minutes of wall time (both: whichever ends first)
    round_trials: int  # trials of one round after the warm-up
    entries: list[Entry]
    warmup_trials: int = 0  # trials of a task's first round (0: round_trials)
    spent: int = 0  # trials spent over all tasks
    elapsed_s: float = 0.0  # wall time spent tuning over all runs
    in_flight: dict[str, int] | None = None  # {"task": index, "upto": its experiment's trials at the end}
    version: int = VERSION

    def save(self, out: Path) -> None:
        """Write out/manifest.json atomically."""
        out.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out, prefix=".manifest-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f, indent=1)
            f.write("\n")
        os.replace(tmp, out / NAME)

    @classmethod
    def load(cls, out: Path) -> Manifest | None:
        """The manifest in `out`, or None where there is none; ManifestError where it cannot be read."""
        path = out / NAME
        if not path.exists():
            return None
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            if data.get("version") != VERSION:
                raise ManifestError(f"{path}: version {data.get('version')!r}, expected {VERSION}")
            entries = [Entry(**{**e, "progress": Progress(**e["progress"])}) for e in data.pop("entries")]
            return cls(**data, entries=entries)
        except (OSError, ValueError, TypeError, KeyError) as err:
            if isinstance(err, ManifestError):
                raise
            raise ManifestError(f"{path} cannot be read ({err}); move it away to start afresh") from None

    def check_same(self, workloads: list[str], device: str, out: Path) -> None:
        """Raise unless this manifest is of these tasks on this device (a resume, not another model).  The
        order is not compared: a model profiled again may list two tasks of close times the other way round."""
        mine = [e.workload for e in self.entries]
        if sorted(mine) != sorted(workloads):
            raise ManifestError(f"{out / NAME} is the tuning of other tasks ({', '.join(mine[:4])}"
                                f"{', ...' if len(mine) > 4 else ''}); give another folder to tune these")
        if self.device != device:
            raise ManifestError(f"{out / NAME} was tuned on {self.device}, not on this device ({device}); "
                                f"give another folder")

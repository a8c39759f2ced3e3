"""What a tuner knows about each configuration, and the file that keeps it across restarts.

NNI 3.0 never calls `save_checkpoint`, so a tuner persists itself: the state file is a JSON-lines log
in the experiment's checkpoint directory, a header (the search space the entries belong to) then one
line per change of an entry, appended as results arrive. Appending keeps the cost of a change
independent of the run's length (rewriting the whole state after every result made a long run
quadratic); a later line for a configuration overrides earlier ones, and a torn last line (a crash
mid-write) is skipped. The file is rewritten whole, atomically, only when the search space changes.
"""
from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

_logger = logging.getLogger(__name__)

VERSION = 2
PENDING, OK, FAILED = "pending", "ok", "failed"


@dataclass
class Entry:
    """A configuration the tuner proposed or was told about: in flight, measured, or failed."""

    config: dict[str, Any]
    state: str
    value: float | None = None

    def to_json(self) -> str:
        return json.dumps({"config": self.config, "state": self.state, "value": self.value})


def parse_metric(value: Any) -> float | None:
    """The number a trial's final result carries, or None when the trial failed.

    Accepts a plain number or the trial's dict `{"default": gflops, "status": ..., ...}`; a status other
    than "ok", or a missing or non-finite number, is a failure.
    """
    if isinstance(value, dict):
        if value.get("status", OK) != OK:
            return None
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        return None
    return float(value)


def measured_params(value: Any, parameter: Any) -> Any:
    """The configuration a result belongs to: the `params` the trial reports it measured, else `parameter`.

    NNI 3.0 can hand a trial another trial's parameters (microsoft/nni#5693, #5726), so what NNI records
    as a trial job's `parameter` can differ from what the job measured. The suite's trials report the
    configuration they built as `params` in their metric dict, and that wins. A result that does not say
    (a plain number, as `nnictl experiment import` takes, or a dict without a `params` dict) can only be
    paired with NNI's `parameter`.
    """
    if isinstance(value, dict) and isinstance(value.get("params"), dict):
        return value["params"]
    return parameter


class StateFile:
    """`<directory>/<tuner>.state.jsonl`: the entries of one tuner of one experiment."""

    def __init__(self, directory: Path, tuner: str) -> None:
        self.path = directory / f"{tuner}.state.jsonl"
        self.tuner = tuner

    def load(self) -> list[Entry]:
        """The saved entries, latest outcome of each configuration; in-flight ones count as failed.

        Empty, with a warning, when the file is unreadable: the run then starts afresh.
        """
        if not self.path.exists():
            return []
        latest: dict[str, Entry] = {}
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
            header = json.loads(lines[0])
            if header.get("version") != VERSION or header.get("tuner") != self.tuner:
                raise ValueError(f"header {lines[0][:200]!r} is not of a version {VERSION} {self.tuner} state")
            for number, line in enumerate(lines[1:], start=2):
                try:
                    record = json.loads(line)
                except ValueError:
                    if number == len(lines):
                        _logger.warning("%s: skipping a torn last line", self.path)
                        break
                    raise
                value = parse_metric(record["value"]) if record["state"] == OK else None
                latest[json.dumps(record["config"], sort_keys=True)] = Entry(
                    record["config"], FAILED if value is None else OK, value)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            _logger.warning("ignoring unreadable tuner state %s: %s", self.path, e)
            return []
        _logger.info("restored %d configurations from %s", len(latest), self.path)
        return list(latest.values())

    def rewrite(self, search_space: dict[str, Any], entries: Iterable[Entry]) -> bool:
        """Replace the file by a header and `entries`, atomically; False (logged) if it cannot be written."""
        header = json.dumps({"version": VERSION, "tuner": self.tuner, "search_space": search_space})
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text("\n".join([header, *(e.to_json() for e in entries)]) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as e:
            _logger.warning("cannot write tuner state to %s: %s", self.path, e)
            return False
        return True

    def append(self, entries: Iterable[Entry]) -> bool:
        """Add the entries' current outcomes; False (logged) if the file cannot be written."""
        text = "".join(e.to_json() + "\n" for e in entries)
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            _logger.warning("cannot write tuner state to %s: %s", self.path, e)
            return False
        return True

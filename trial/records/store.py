"""The records store: every measurement, ok or not, kept for good.

SQLite rather than JSON lines: each append is one transaction, so concurrent trials (several
processes, several GPUs) never interleave or lose records, and a process killed mid-write leaves
the previous state intact (the journal rolls the partial write back).  Lookups of the best config
per workload and device are indexed queries.  The store is a single file:
$OPEVO_RECORDS, default `records/records.sqlite` in the suite's folder (ignored by git).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from searchspace import SearchSpace

from .. import diskfull, templates
from ..results import MeasureResult
from ..workload import Workload

DEFAULT = Path(__file__).resolve().parents[2] / "records" / "records.sqlite"
Upgrade = Callable[[Any], dict[str, Any] | None]
"""Recorded knobs -> the knobs to use instead, or None to pass the record over (`Records.best`)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    workload TEXT NOT NULL,
    target TEXT NOT NULL,
    device TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    gflops REAL NOT NULL,
    latency_ms REAL,
    latency_std_ms REAL,
    build_s REAL,
    experiment TEXT,
    trial TEXT,
    tuner TEXT
);
CREATE INDEX IF NOT EXISTS by_workload ON measurements (workload, device, status, gflops);
CREATE UNIQUE INDEX IF NOT EXISTS one_per_trial ON measurements (experiment, trial);
CREATE TABLE IF NOT EXISTS warnings (
    measurement INTEGER PRIMARY KEY REFERENCES measurements (id),
    warning TEXT NOT NULL
);
"""
_SELECT = "SELECT measurements.*, COALESCE(warning, '') FROM measurements LEFT JOIN warnings ON measurement = id"
"""A measurement's warning (trial/noise.py) lives in a table of its own, made where a store lacks it: stores
from before read with no warnings, and an older checkout that reads every column of `measurements` still
reads a store written since."""


_MEASURED = ("workload", "target", "device", "params", "status", "reason", "gflops", "latency_ms",
             "latency_std_ms", "build_s", "tuner")
"""The columns of a measurement itself; a trial recorded again with the same values leaves its record as it is."""
_COLUMNS = ("time", *_MEASURED, "experiment", "trial")
_UPSERT = (f"INSERT INTO measurements ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
           f" ON CONFLICT (experiment, trial) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _COLUMNS)}"
           f" WHERE ({', '.join(_MEASURED)}) IS NOT ({', '.join(f'excluded.{c}' for c in _MEASURED)})")
"""One measurement in; a trial of an experiment recorded before is replaced when its measurement differs."""


@dataclass
class Record:
    id: int
    time: float
    workload: str
    target: str
    device: str
    params: dict[str, Any]
    status: str
    reason: str
    gflops: float
    latency_ms: float | None
    latency_std_ms: float | None
    build_s: float | None
    experiment: str | None
    trial: str | None
    tuner: str | None
    warning: str = ""  # why the timing may not be sound (trial/noise.py); "" for records from before


def default_path() -> Path:
    return Path(os.environ.get("OPEVO_RECORDS") or DEFAULT)


def params_key(params: dict[str, Any] | None) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


class RecordsError(sqlite3.Error):
    """A records store that cannot be opened or created; the message names its path."""


class Records:
    """The store at `path` (default: $OPEVO_RECORDS or records/records.sqlite)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path else default_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # one process at a time: switching a new store to WAL can fail with "database is locked"
            # at once, without waiting, while another process is doing the same
            with FileLock(f"{self.path}.lock"), self._connect() as db:
                db.executescript(_SCHEMA)
        except RecordsError:
            raise
        except (OSError, sqlite3.Error) as err:
            raise RecordsError(f"records store {self.path}: {getattr(err, 'strerror', None) or err}") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection in one transaction; a full disk (which SQLite may call a "disk I/O error") says so."""
        try:
            with closing(sqlite3.connect(self.path, timeout=60)) as db:
                db.execute("PRAGMA journal_mode=WAL")
                with db:  # one transaction: committed on success, rolled back on error
                    yield db
        except (OSError, sqlite3.Error) as err:
            cause = diskfull.full(err, self.path.parent)
            if cause is None:
                raise
            raise RecordsError(f"records store {self.path}: {cause} ({err})") from err

    def append(self, wl: Workload, result: MeasureResult, experiment: str | None = None,
               trial: str | None = None, tuner: str | None = None) -> bool:
        """Keep one measurement; True if the store changed.

        A store holds one record per trial of an experiment, the measurement NNI holds for it: NNI runs
        a trial again under the same id when it resumes an experiment whose manager died while the trial
        ran, and that run's measurement replaces the earlier one (a trial records only what NNI took,
        see `python -m trial`). Recording the same measurement again changes nothing (an import run
        twice), and measurements outside an experiment are all kept.
        """
        row = (time.time(), wl.key, result.target, result.device, params_key(result.params), result.status,
               result.reason, result.gflops, result.latency_ms, result.latency_std_ms, result.build_s, tuner,
               experiment, trial)
        with self._connect() as db:
            cur = db.execute(_UPSERT, row)
            if cur.rowcount != 1:
                return False
            measurement = (db.execute("SELECT id FROM measurements WHERE experiment = ? AND trial = ?",
                                      (experiment, trial)).fetchone()[0]
                           if experiment is not None and trial is not None else cur.lastrowid)
            db.execute("DELETE FROM warnings WHERE measurement = ?", (measurement,))
            if result.warning:
                db.execute("INSERT INTO warnings (measurement, warning) VALUES (?, ?)", (measurement, result.warning))
            return True

    @staticmethod
    def _where(workload: str | None, device: str | None, status: str | None) -> tuple[str, list[str]]:
        where, args = [], []
        for column, value in (("workload", workload), ("device", device), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        return (" WHERE " + " AND ".join(where) if where else ""), args

    def query(self, workload: str | None = None, device: str | None = None, status: str | None = None,
              best_first: bool = False, limit: int | None = None) -> list[Record]:
        """Records matching every given field; newest first, or fastest first with `best_first`."""
        where, args = self._where(workload, device, status)
        sql = _SELECT + where
        sql += " ORDER BY gflops DESC, time ASC" if best_first else " ORDER BY time DESC, id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._connect() as db:
            rows = db.execute(sql, args).fetchall()
        return [Record(*row[:5], json.loads(row[5]), *row[6:]) for row in rows]

    def count(self, workload: str | None = None, device: str | None = None, status: str | None = None) -> int:
        """How many records match every given field."""
        where, args = self._where(workload, device, status)
        with self._connect() as db:
            return db.execute("SELECT COUNT(*) FROM measurements" + where, args).fetchone()[0]

    def best(self, workload: str, device: str | None = None, n: int = 1, fits: Upgrade | None = None) -> list[Record]:
        """The `n` fastest verified configs (one record per distinct config) of `workload`; with `fits`, only
        those it takes, each record carrying its config as `fits` returns it (e.g. as the template takes it
        now: `as_template_takes`)."""
        out, seen = [], set()
        for rec in self.query(workload, device, "ok", best_first=True):
            params = rec.params if fits is None else fits(rec.params)
            key = None if params is None else params_key(params)
            if key is None or key in seen:
                continue
            seen.add(key)
            out.append(replace(rec, params=params))
            if len(out) == n:
                break
        return out

    def best_kernel(self, wl: Workload, device: str | None) -> Record | None:
        """The fastest verified kernel of `wl` on `device` (None: any) whose knobs one of the op's templates
        takes now, with its knobs as that template takes them (`as_template_takes`); None if there is none."""
        found = self.best(wl.key, device, fits=as_template_takes(wl))
        return found[0] if found else None


def decode_metric(data: str) -> Any:
    """A final metric as NNI stores it: JSON, whose value may itself be a JSON string."""
    metric = json.loads(data)
    return json.loads(metric) if isinstance(metric, str) else metric


def as_template_takes(wl: Workload) -> Upgrade:
    """Recorded knobs -> the same kernel's knobs as one of the op's templates takes them now, or None where none
    does: records outlive knob changes, so a template upgrades a config recorded before its knobs changed (its
    `upgrade`) and its space fills in the knobs of the kernel families the config does not choose."""
    spaces = [(t, SearchSpace.from_json(t.search_space(wl))) for t in templates.candidates(wl)]

    def takes(params: Any) -> dict[str, Any] | None:
        if not isinstance(params, dict):  # e.g. an imported metric without params
            return None
        for template, space in spaces:
            upgraded = space.with_inert(template.upgrade(wl, params) if hasattr(template, "upgrade") else params)
            if space.contains(upgraded):
                return upgraded
        return None

    return takes

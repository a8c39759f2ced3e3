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
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .results import MeasureResult
from .workload import SpecError, Workload, parse_name

DEFAULT = Path(__file__).resolve().parent.parent / "records" / "records.sqlite"

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
"""


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


def default_path() -> Path:
    return Path(os.environ.get("OPEVO_RECORDS") or DEFAULT)


def params_key(params: dict[str, Any] | None) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


class Records:
    """The store at `path` (default: $OPEVO_RECORDS or records/records.sqlite)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=60)) as db:
            db.execute("PRAGMA journal_mode=WAL")
            with db:  # one transaction: committed on success, rolled back on error
                yield db

    def append(self, wl: Workload, result: MeasureResult, experiment: str | None = None,
               trial: str | None = None, tuner: str | None = None) -> bool:
        """Keep one measurement; False if this experiment's trial was recorded already."""
        row = (time.time(), wl.key, result.target, result.device, params_key(result.params), result.status,
               result.reason, result.gflops, result.latency_ms, result.latency_std_ms, result.build_s,
               experiment, trial, tuner)
        with self._connect() as db:
            cur = db.execute("INSERT OR IGNORE INTO measurements (time, workload, target, device, params, status,"
                             " reason, gflops, latency_ms, latency_std_ms, build_s, experiment, trial, tuner)"
                             " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
            return cur.rowcount == 1

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
        sql = "SELECT * FROM measurements" + where
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

    def best(self, workload: str, device: str | None = None, n: int = 1,
             fits: Callable[[Any], bool] | None = None) -> list[Record]:
        """The `n` fastest verified configs (one record per distinct config) of `workload`; with `fits`,
        only configs it accepts (e.g. those of the template's current search space)."""
        out, seen = [], set()
        for rec in self.query(workload, device, "ok", best_first=True):
            key = params_key(rec.params)
            if key not in seen and (fits is None or fits(rec.params)):
                seen.add(key)
                out.append(rec)
            if len(out) == n:
                break
        return out

    def import_experiment(self, experiment_dir: str | os.PathLike[str], workload: str | None = None) -> int:
        """Add the final results of an NNI experiment folder (<nni dir>/<id>); returns how many were new.

        The workload is read from the experiment's trialCommand (`... -m trial <op> <spec>`) unless given.
        """
        folder = Path(experiment_dir)
        with closing(sqlite3.connect(f"file:{folder / 'db' / 'nni.sqlite'}?mode=ro", uri=True)) as nni_db:
            profile = json.loads(nni_db.execute("SELECT params FROM ExperimentProfile ORDER BY revision DESC"
                                                " LIMIT 1").fetchone()[0])
            metrics = nni_db.execute("SELECT trialJobId, data FROM MetricData WHERE type = 'FINAL'").fetchall()
        from .space import read_trial_command

        command = profile.get("trialCommand", "")
        found = read_trial_command(command)
        if workload is None:
            if not found:
                raise ValueError(f"cannot tell the workload from trialCommand {command!r}; name it")
            workload = "/".join(found[:2])
        wl = parse_name(workload)
        tuner = found[2] if found else None
        new = 0
        for trial_id, data in metrics:
            metric = decode_metric(data)
            if not isinstance(metric, dict) or "status" not in metric:
                continue  # not a trial of this suite
            device = re.sub(r" \(device \d+\)$", "", metric.get("device", ""))
            result = MeasureResult(metric["status"], metric.get("reason", ""), metric.get("params"),
                                   metric.get("gflops", 0.0), metric.get("latency_ms"),
                                   metric.get("latency_std_ms"), metric.get("build_s"), metric.get("target", ""),
                                   device)
            new += self.append(wl, result, folder.name, trial_id, tuner)
        return new


def decode_metric(data: str) -> Any:
    """A final metric as NNI stores it: JSON, whose value may itself be a JSON string."""
    metric = json.loads(data)
    return json.loads(metric) if isinstance(metric, str) else metric


def fits_template(wl: Workload) -> Callable[[Any], bool]:
    """Whether recorded knobs fit the op's template as it is now: records outlive knob changes."""
    from tuners.space import SearchSpace

    from . import templates

    return SearchSpace.from_json(templates.load(wl.op).search_space(wl)).contains


def _table(records: list[Record]) -> str:
    lines = [f"{'gflops':>10} {'ms':>10} {'status':13} {'device':28} {'tuner':6} params"]
    for r in records:
        ms = f"{r.latency_ms:.4f}" if r.latency_ms else "-"
        lines.append(f"{r.gflops:10.1f} {ms:>10} {r.status:13} {r.device[:28]:28} {r.tuner or '-':6} "
                     f"{json.dumps(r.params)}" + (f"  ({r.reason[:60]})" if r.reason else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from .measure import this_device

    p = argparse.ArgumentParser(prog="python -m trial.records", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", help="the store (default: $OPEVO_RECORDS or records/records.sqlite)")
    sub = p.add_subparsers(dest="command", required=True)
    device_help = "device name as recorded (default: this machine's; 'any' for all devices)"
    best = sub.add_parser("best", help="the best verified configs of a workload")
    best.add_argument("workload", help="op/spec, e.g. mm/N512K1024M1024")
    best.add_argument("--device", help=device_help)
    best.add_argument("-n", type=int, default=1, help="how many distinct configs")
    best.add_argument("--json", action="store_true", help="print JSON records")
    listing = sub.add_parser("list", help="recent measurements")
    listing.add_argument("--workload")
    listing.add_argument("--device")
    listing.add_argument("--status")
    listing.add_argument("--limit", type=int, default=20)
    export = sub.add_parser("export", help="library, source, knobs and report of the best kernel")
    export.add_argument("workload")
    export.add_argument("--out", type=Path, help="folder (default: exports/<op>/<spec>)")
    export.add_argument("--device", help=device_help)
    importing = sub.add_parser("import", help="add an NNI experiment's results")
    importing.add_argument("experiment", help="experiment id or folder (<experimentWorkingDirectory>/<id>)")
    importing.add_argument("--workload", help="op/spec if the trialCommand does not say")
    importing.add_argument("--nni-dir", type=Path, default=Path.home() / "nni-experiments",
                           help="NNI's experiment folder, for an id (default ~/nni-experiments)")
    for parser in (best, export):
        parser.add_argument("--target", default=os.environ.get("OPEVO_TARGET", "auto"),
                            help="which device is this machine's (auto|cuda|rocm|llvm)")
    args = p.parse_args(argv)
    try:
        wl = parse_name(args.workload) if args.workload else None
    except SpecError as err:
        p.error(str(err))
    store = Records(args.records)

    if args.command == "import":
        folder = Path(args.experiment)
        folder = folder if folder.is_dir() else args.nni_dir / args.experiment
        if not (folder / "db" / "nni.sqlite").exists():
            p.error(f"no NNI experiment at {folder}")
        print(f"{store.import_experiment(folder, args.workload)} new records from {folder}")
        return 0
    if args.command == "list":
        print(_table(store.query(wl and wl.key, args.device, args.status, limit=args.limit)))
        return 0
    device = None if args.device == "any" else (args.device or this_device(args.target))
    found = store.best(wl.key, device, n=args.n if args.command == "best" else 1, fits=fits_template(wl))
    if not found:
        print(f"no verified record of {wl.key} on {device or 'any device'} whose knobs fit the template, "
              f"in {store.path}")
        return 1
    if args.command == "best":
        print(json.dumps([r.__dict__ for r in found], indent=1) if args.json else _table(found))
        return 0
    from .export import ExportError, export as export_kernel

    out = args.out or Path("exports") / wl.op / wl.spec
    trials = store.count(wl.key, found[0].device)
    try:
        report = export_kernel(wl, found[0], out, args.target, trials=trials)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tuned = report["tuned"]
    print(f"exported to {out}: {tuned['gflops']:.1f} GFLOPS ({tuned['latency_ms']:.4f} ms; recorded "
          f"{found[0].latency_ms:.4f} ms), {report['improvement'] or 0:.2f}x the hand-picked config")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

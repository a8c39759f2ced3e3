"""Running the benchmark protocol's missing runs: the tuners' runs, then, alone, each workload's vendor and peer.

A run is one (workload, tuner, seed) of `benchmarks.protocol_run`; those without a current record (`current`:
one whose best config is of a template the suite no longer picks for the workload there) run, P at a time
(MetaSchedule's after the others, each in a share of the host of its own with --metaschedule-parallel), and
each is saved as it ends, so a killed protocol resumes where it stopped.  The vendor library is timed once per
workload, after every run, from the protocol's main thread with the measuring service idle: timed beside
runs that share its process, the replays of its CUDA graph wait for their Python threads (the GIL) and the
library reads slow (docs/results.md, "The vendor timed alone").
"""
from __future__ import annotations

import argparse
import logging
import queue
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trial.measure import Options, device
from trial.records import Records
from trial.target import Target
from trial.workload import Workload, parse_name

from . import metaschedule, placement, protocol_run
from .workloads import Entry

_logger = logging.getLogger(__name__)

Job = tuple[Entry, str, int]
"""One run of the protocol: a workload, a tuner and a seed."""


def path(job: Job, args: argparse.Namespace) -> Path:
    """Where `job`'s record lives under --out."""
    entry, tuner, seed = job
    return protocol_run.path(args.out, parse_name(entry.workload), tuner, seed, args.trials, args.workers)


def current(record: dict[str, Any] | None, wl: Workload, target: Target) -> bool:
    """Whether `record` stands: there is one, and its best config (if any) is of the template the suite picks
    for `wl` on `target` now, over the same space; a record of a template since replaced (a new one serves the
    workload) or of a space since changed (`protocol_run.space_of`) runs again."""
    if record is None:
        return False
    found = protocol_run.recorded_template(wl, record)
    if found is None:
        return True
    if found != protocol_run.picked_template(wl, target):
        return False
    # a record written before records kept their space stands
    return "space" not in record or record["space"] == protocol_run.space_of(wl, found)


def past_deadline(args: argparse.Namespace, seconds: float = 0.0) -> bool:
    """Whether what takes `seconds` would not end within --for's seconds, so that it does not start (the runs
    under way finish)."""
    return args.deadline is not None and time.monotonic() + seconds >= args.deadline


class Durations:
    """The seconds the recorded runs took, per workload and tuner (`run_s`, from a run's start to its record;
    `wall_s`, its tuning alone, for records written before they kept it): what --for judges by whether a run
    would end in time."""

    def __init__(self) -> None:
        self._seconds: dict[tuple[str, str], list[float]] = {}
        self._lock = threading.Lock()

    def add(self, job: Job, record: dict[str, Any] | None) -> None:
        seconds = record and (record.get("run_s") or record.get("wall_s"))
        if seconds:
            with self._lock:
                self._seconds.setdefault((job[0].workload, job[1]), []).append(float(seconds))

    def expected(self, job: Job) -> float:
        """The median seconds of `job`'s tuner's recorded runs on its workload, else on every workload; 0 where
        it has none (the run starts while --for's time lasts)."""
        entry, tuner, _ = job
        with self._lock:
            found = self._seconds.get((entry.workload, tuner)) or [
                seconds for (_, by), runs in self._seconds.items() if by == tuner for seconds in runs]
        return statistics.median(found) if found else 0.0


def run_missing(jobs: list[Job], args: argparse.Namespace, options: Options, records: Records,
                failed: list[str], parallel: int, shares: list[placement.Share] | None = None,
                left: list[Job] | None = None) -> int:
    """Run and save every job without a record, `parallel` at a time (each in a share of the host of its
    own, where `shares` are given); returns how many ran.  A run that raises is logged and named in
    `failed`, and left out (it runs again next time); one that would not end by --for's end, as long as the
    recorded runs of its tuner took (`Durations`), does not start and goes into `left`."""
    free: queue.SimpleQueue[placement.Share | None] = queue.SimpleQueue()
    for share in shares or [None] * parallel:
        free.put(share)
    durations = Durations()

    def one(job: Job) -> int:
        entry, tuner, seed = job
        wl = parse_name(entry.workload)
        share = free.get()
        if past_deadline(args, durations.expected(job)):  # left for the next invocation
            free.put(share)
            if left is not None:
                left.append(job)
            return 0
        started = time.monotonic()
        try:
            record = protocol_run.one(wl, entry.model, tuner, seed, args.trials, args.workers, options, records,
                                      not args.no_progress and parallel == 1, share=share)
        except Exception as err:  # noqa: BLE001 - one broken run must not end the protocol
            _logger.exception("%s %s seed %d failed", wl.name, tuner, seed)
            failed.append(f"{wl.name} {tuner} seed {seed}: {type(err).__name__}: {err}")
            return 0
        finally:
            free.put(share)
        record = {**record, "parallel": parallel, "run_s": round(time.monotonic() - started, 1)}
        protocol_run.save(path(job, args), record)
        durations.add(job, record)
        return 1

    where, missing = device(args.target), []
    for job in jobs:
        record = protocol_run.load(path(job, args))
        if current(record, parse_name(job[0].workload), where):
            durations.add(job, record)
        else:
            missing.append(job)
    with ThreadPoolExecutor(parallel, thread_name_prefix="run") as pool:
        return sum(pool.map(one, missing))


Timed = Callable[[Workload, str, Any, Options], "dict[str, Any] | None"]
Stands = Callable[[Workload, "dict[str, Any]"], bool]
ALONE: dict[str, tuple[Timed, Callable[[Path, Workload], Path], Stands]] = {
    "vendor": (protocol_run.vendor, protocol_run.vendor_path, protocol_run.searched_alike),
    protocol_run.PEER: (protocol_run.peer, protocol_run.peer_path, protocol_run.peer_searched_alike),
}
"""What is timed alone on each workload after the runs: how, where its record lives, and whether a record
there stands (else it is timed again: the vendor's figure, the peer's or the one its ratio divides by, timed
as they are no longer timed)."""


def alone_seconds(record: dict[str, Any] | None) -> float | None:
    """The seconds a timing alone took: "alone_s", from its start to its record, else (records written before
    they kept it) its compilation and autotuning, "compile_s"; None where the record has neither."""
    seconds = record and (record.get("alone_s") or record.get("compile_s"))
    return float(seconds) if seconds else None


def alone_missing(name: str, entries: list[Entry], args: argparse.Namespace, options: Options,
                  failed: list[str], deadline: bool = True) -> int:
    """Time `name` (of ALONE) on each workload without a record that stands, one at a time after the runs, so
    that it has the device and the host to itself; returns how many were recorded.  One that raises is named
    in `failed` (the protocol goes on; it runs again next time).  With `deadline`, none starts that would not
    end within --for, as long as its earlier record took (`alone_seconds`), else the median of the records
    there: a peer's autotuning takes seconds to minutes a workload."""
    timed, where, stands = ALONE[name]
    found = {entry: protocol_run.load(where(args.out, parse_name(entry.workload))) for entry in entries}
    recorded = [s for s in map(alone_seconds, found.values()) if s is not None]
    typical = statistics.median(recorded) if recorded else 0.0
    ran = 0
    for entry in entries:
        wl, record = parse_name(entry.workload), found[entry]
        if record is not None and stands(wl, record):
            continue
        if deadline and past_deadline(args, alone_seconds(record) or typical):
            continue
        started = time.monotonic()
        try:
            record = timed(wl, entry.model, device(args.target), options)
        except Exception as err:  # noqa: BLE001 - the library failed on this workload: the protocol goes on
            _logger.exception("%s %s failed", wl.name, name)
            failed.append(f"{wl.name} {name}: {type(err).__name__}: {err}")
            continue
        if record is not None:
            protocol_run.save(where(args.out, wl), {**record, "alone_s": round(time.monotonic() - started, 1)})
            ran += 1
    return ran


def run_all(jobs: list[Job], entries: list[Entry], args: argparse.Namespace, options: Options,
            records: Records, failed: list[str]) -> tuple[int, int]:
    """Run every job without a record (MetaSchedule's after the others), then time alone each workload's
    vendor (where no run of it waits for the next invocation: seconds each, so even after --for's end) and,
    unless --no-peer, its peer; how many runs ran, and how many timings alone."""
    alone, left = [job for job in jobs if metaschedule.is_label(job[1])], []
    ran = run_missing([job for job in jobs if job not in alone], args, options, records, failed, args.parallel,
                      left=left)
    ran += run_missing(alone, args, options, records, failed, args.metaschedule_parallel, args.shares, left)
    waiting = {job[0] for job in left}
    timed = alone_missing("vendor", [e for e in entries if e not in waiting], args, options, failed, deadline=False)
    if not args.no_peer:
        timed += alone_missing(protocol_run.PEER, entries, args, options, failed)
    return ran, timed

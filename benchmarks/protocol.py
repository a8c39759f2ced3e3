"""The benchmark protocol: frozen tuners on the study's and held-out workloads, several seeds, medians with CIs.

    python -m benchmarks.protocol [--quick] [--set study|held-out|all] [--tuners opevo gbfs na2c random metaschedule]
        [--seeds 5] [--trials 128] [--workers auto|N] [--parallel P] [--target auto|cuda|rocm|llvm] [--out DIR]
        [--workloads op/spec ...]

Every (workload, tuner, seed) is one run of `benchmarks.driver` with the experiments' classArgs
(`experiments.registry`, no variants: the settings are frozen), its 3 best distinct configs re-timed and
the vendor library timed beside it (`benchmarks.protocol_run`).  MetaSchedule's runs (`metaschedule`, or a
label with its search's arguments, `benchmarks.metaschedule`) come after the others, one at a time, so
that its search, cost model and builder have the host's cores and its candidates every GPU to themselves;
with --metaschedule-parallel P, P at a time, each seeing one GPU of its own and running on 1/P of the
physical cores (`benchmarks.placement`), so that no run shares its cores (each record says its share).
Then, alone, the peer on each workload: `torch.compile` in its max-autotune mode of the vendor's call, the
vendor timed beside it (--no-peer: none).
Each run's record is a JSON file under --out (default results/protocol); a run whose file is there is
not run again, so a killed protocol resumes where it stopped.  Then a markdown table per workload set
is printed after a header with the command, device and versions (`benchmarks.protocol_report`), and
written to OUT/summary.md.

--quick: the first study and held-out workloads, OpEvo only, 1 seed, 64 trials (one short GPU session);
flags given with it still win.  --workloads replaces the sets by the given op/spec names.

--publish [PAGE] also writes the report into PAGE (docs/results.md), between markers that it replaces
the next time, and its plots into PAGE's folder's protocol/ (`benchmarks.protocol_publish`).

--parallel P runs P of the missing runs at a time (default 1), in one measuring service that spreads
their kernels over every GPU of the host: on G GPUs, P = G with P x --workers trials in flight at most
one per core keeps each run's pace close to a run alone on one GPU.  The record of each run says P, since
its seconds (time to quality, wall time) are those of a run that shared the host.
"""
from __future__ import annotations

import argparse
import logging
import os
import queue
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from experiments import registry
from experiments.write import auto_concurrency, concurrency_arg
from trial.inputs import number_type
from trial.measure import Options, device
from trial.records import Records, RecordsError
from trial.target import KINDS, TargetError
from trial.service.client import ROOT, ServiceError
from trial.workload import SpecError, parse_name

from . import driver, metaschedule, placement, protocol_publish, protocol_report, protocol_run, workloads
from .workloads import Entry

_logger = logging.getLogger(__name__)

PAGE = ROOT / "docs" / "results.md"
DEFAULTS = {"tuners": ["opevo", "gbfs", "na2c", "random", metaschedule.NAME], "seeds": 5, "trials": 128}
QUICK = {"tuners": ["opevo"], "seeds": 1, "trials": 64}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.protocol", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--quick", action="store_true", help="one study and one held-out workload, opevo, 1 seed, 64 trials")
    p.add_argument("--set", default="all", help="study, held-out or all (default all)")
    p.add_argument("--workloads", nargs="+", metavar="OP/SPEC", help="run these workloads instead of the sets")
    p.add_argument("--tuners", nargs="+", metavar="TUNER",
                   help=f"of {', '.join(driver.TUNERS)}, {metaschedule.NAME}[ARGS] "
                        f"(default {' '.join(DEFAULTS['tuners'])})")
    p.add_argument("--seeds", type=number_type(int, 1, 1000), help=f"seeds 0..S-1 per tuner (default {DEFAULTS['seeds']})")
    p.add_argument("--trials", type=number_type(int, 1, 100_000), help=f"trials per run (default {DEFAULTS['trials']})")
    p.add_argument("--workers", type=concurrency_arg, default="auto",
                   help="trials in flight in a run: a number, or auto (default): as many as an experiment on one "
                        f"GPU of this machine runs, {registry.CONCURRENCY} on a CPU")
    p.add_argument("--parallel", type=number_type(int, 1, 256), default=1,
                   help="runs at a time, their kernels spread over the host's GPUs (default 1)")
    p.add_argument("--metaschedule-parallel", type=number_type(int, 1, 64), default=1,
                   help="MetaSchedule's runs at a time, each with a GPU and 1/P of the cores of its own (default 1: "
                        "one at a time with the whole host)")
    p.add_argument("--target", choices=KINDS, default=os.environ.get("OPEVO_TARGET", "auto"))
    p.add_argument("--min-repeat-ms", type=number_type(int, 1, 60000), default=Options.min_repeat_ms,
                   help=f"minimum length of a timed repeat (default {Options.min_repeat_ms})")
    p.add_argument("--out", type=Path, default=Path("results/protocol"), help="run records and summary.md")
    p.add_argument("--records", help="records store (default: $OPEVO_RECORDS or records/records.sqlite)")
    p.add_argument("--no-peer", action="store_true", help=f"leave out the peer ({protocol_run.PEER})")
    p.add_argument("--publish", nargs="?", type=Path, const=PAGE, metavar="PAGE",
                   help=f"also write the report into PAGE (default {PAGE.relative_to(ROOT)}) and its plots beside it")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def plan_sets(args: argparse.Namespace) -> dict[str, tuple[Entry, ...]]:
    """The workload sets of the command line; ValueError for an unknown set or a bad spec."""
    if args.workloads:
        return {"given": tuple(Entry(parse_name(name).name, "given on the command line") for name in args.workloads)}
    chosen = workloads.chosen(args.set)
    if args.quick:
        quick = dict(zip(workloads.SETS, ((entry,) for entry in workloads.QUICK)))
        return {name: quick[name] for name in chosen}
    return chosen


def resolve(args: argparse.Namespace) -> None:
    """Fill the flags left out from --quick's or the full protocol's defaults; ValueError for an unknown tuner."""
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for tuner in args.tuners:
        if metaschedule.is_label(tuner):
            metaschedule.strategy(tuner)  # its search's arguments (ValueError for one it does not have)
        elif tuner not in driver.TUNERS:
            raise ValueError(f"unknown tuner {tuner!r}: expected one of {', '.join(driver.TUNERS)} or "
                             f"{metaschedule.NAME}[ARGS] (the protocol runs the experiments' frozen settings, so "
                             "no variants of the suite's tuners)")
    args.tuners = list(dict.fromkeys(args.tuners))


def workers(args: argparse.Namespace) -> int:
    """--workers as a number: auto is what `nnictl create` of a written experiment runs on one GPU of this
    machine (`experiments.write.auto_concurrency`), so that the frozen settings are measured as users run
    them (OpEvo breeds that many offspring at once: `experiments.registry.class_args`)."""
    if args.workers != "auto":
        return args.workers
    return auto_concurrency(args.target, 1 if device(args.target).is_gpu else 0)


def shares(args: argparse.Namespace) -> list[placement.Share] | None:
    """MetaSchedule's shares of the host with --metaschedule-parallel P > 1 (ValueError where there are
    fewer GPUs or physical cores than P), else None: one run at a time with the whole host."""
    if args.metaschedule_parallel == 1 or not any(metaschedule.is_label(t) for t in args.tuners):
        return None
    found = device(args.target)
    gpus = placement.visible_gpus(found.num_devices) if found.is_gpu else []
    return placement.shares(args.metaschedule_parallel, gpus, placement.physical_cores())


def _device(kind: str, seen: list[str]) -> str:
    """The device the records name, else the one a trial would use (asking the measuring service)."""
    if seen:
        return ", ".join(dict.fromkeys(seen))
    try:
        return device(kind).device_name
    except (TargetError, ServiceError) as err:
        return f"unknown ({err})"


Job = tuple[Entry, str, int]
"""One run of the protocol: a workload, a tuner and a seed."""


def run_missing(jobs: list[Job], args: argparse.Namespace, options: Options, records: Records,
                failed: list[str], parallel: int, shares: list[placement.Share] | None = None) -> int:
    """Run and save every job without a record, `parallel` at a time (each in a share of the host of its
    own, where `shares` are given); returns how many ran.  A run that raises is logged and named in
    `failed`, and left out (it runs again next time)."""
    free: queue.SimpleQueue[placement.Share | None] = queue.SimpleQueue()
    for share in shares or [None] * parallel:
        free.put(share)

    def one(job: Job) -> int:
        entry, tuner, seed = job
        wl = parse_name(entry.workload)
        share = free.get()
        try:
            record = protocol_run.one(wl, entry.model, tuner, seed, args.trials, args.workers, options, records,
                                      not args.no_progress and parallel == 1, share=share)
        except Exception as err:  # noqa: BLE001 - one broken run must not end the protocol
            _logger.exception("%s %s seed %d failed", wl.name, tuner, seed)
            failed.append(f"{wl.name} {tuner} seed {seed}: {type(err).__name__}: {err}")
            return 0
        finally:
            free.put(share)
        protocol_run.save(_path(job, args), {**record, "parallel": parallel})
        return 1

    missing = [job for job in jobs if protocol_run.load(_path(job, args)) is None]
    with ThreadPoolExecutor(parallel, thread_name_prefix="run") as pool:
        return sum(pool.map(one, missing))


def peers_missing(entries: list[Entry], args: argparse.Namespace, options: Options, failed: list[str]) -> int:
    """Run the peer on each workload without its record, one at a time after the tuners' runs, so that it
    has the device and the cores to itself; returns how many ran.  One that raises is named in `failed`."""
    ran = 0
    for entry in entries:
        wl = parse_name(entry.workload)
        where = protocol_run.peer_path(args.out, wl)
        if protocol_run.load(where) is not None:
            continue
        try:
            record = protocol_run.peer(wl, entry.model, device(args.target), options)
        except Exception as err:  # noqa: BLE001 - the vendor beside it failed: the protocol goes on
            _logger.exception("%s %s failed", wl.name, protocol_run.PEER)
            failed.append(f"{wl.name} {protocol_run.PEER}: {type(err).__name__}: {err}")
            continue
        if record is not None:
            protocol_run.save(where, record)
            ran += 1
    return ran


def _path(job: Job, args: argparse.Namespace) -> Path:
    entry, tuner, seed = job
    return protocol_run.path(args.out, parse_name(entry.workload), tuner, seed, args.trials, args.workers)


def recorded(entry: Entry, tuner: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The records of `tuner`'s seeds on `entry` that are there."""
    found = (protocol_run.load(_path((entry, tuner, seed), args)) for seed in range(args.seeds))
    return [record for record in found if record is not None]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = p.parse_args(argv)
    try:
        resolve(args)
        sets = plan_sets(args)
        records = Records(args.records)
        args.workers = workers(args)
        args.shares = shares(args)
    except (SpecError, ValueError, RecordsError, TargetError, ServiceError) as err:
        p.error(str(err))
    logging.getLogger("nni").setLevel(logging.WARNING)
    options = Options(target=args.target, min_repeat_ms=args.min_repeat_ms)
    failed: list[str] = []
    jobs = [(entry, tuner, seed) for entries in sets.values() for entry in entries
            for tuner in args.tuners for seed in range(args.seeds)]
    alone = [job for job in jobs if metaschedule.is_label(job[1])]
    ran = run_missing([job for job in jobs if job not in alone], args, options, records, failed, args.parallel)
    ran += run_missing(alone, args, options, records, failed, args.metaschedule_parallel, args.shares)
    if not args.no_peer:
        ran += peers_missing([entry for entries in sets.values() for entry in entries], args, options, failed)
    tables, seen, plotted = [], [], {}
    for title, entries in sets.items():
        rows, with_vendor, plotted[title] = [], False, {}
        for entry in entries:
            for tuner in args.tuners:
                found = recorded(entry, tuner, args)
                seen += [r["device"] for r in found if r.get("device")]
                with_vendor |= any(r.get("vendor") for r in found)
                rows.append(protocol_report.row(entry, tuner, found))
                plotted[title].setdefault(entry.workload, []).extend(found)
            if not args.no_peer:
                rows.append(protocol_report.peer_row(entry, protocol_run.PEER, protocol_run.load(
                    protocol_run.peer_path(args.out, parse_name(entry.workload)))))
        tables.append(protocol_report.table(title, rows, with_vendor))
    text = "\n\n".join([f"# Benchmark protocol\n\n{protocol_report.header(argv, _device(args.target, seen))}", *tables])
    if failed:
        text += "\n\n**Runs that failed** (not recorded, so run again next time):\n\n" + "".join(
            f"- {line[:500]}\n" for line in failed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    if args.publish:
        images = protocol_publish.plots(plotted, args.publish.parent / "protocol")
        protocol_publish.publish(args.publish, text, images)
        print(f"wrote the report into {args.publish} and {len(images)} plots beside it", file=sys.stderr)
    print(f"{ran} runs measured, the others read from {args.out}; wrote {args.out / 'summary.md'}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

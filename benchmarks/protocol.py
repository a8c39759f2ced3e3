"""The benchmark protocol: frozen tuners on the study's and held-out workloads, several seeds, medians with CIs.

    python -m benchmarks.protocol [--quick] [--set study|held-out|tensor-cores|all]
        [--tuners opevo gbfs na2c random metaschedule]
        [--seeds 5] [--trials 128] [--workers auto|N] [--parallel P] [--target auto|cuda|rocm|llvm] [--out DIR]
        [--workloads op/spec ...] [--for SECONDS] [--report] [--publish [PAGE]]

Every (workload, tuner, seed) is one run of `benchmarks.driver` with the experiments' classArgs
(`experiments.registry`, no variants: the settings are frozen), its 3 best distinct configs re-timed
(`benchmarks.protocol_run`); the runs go in `benchmarks.protocol_jobs`.  MetaSchedule's runs (`metaschedule`, or a
label with its search's arguments, `benchmarks.metaschedule`) come after the others, one at a time, so
that its search, cost model and builder have the host's cores and its candidates every GPU to themselves;
with --metaschedule-parallel P, P at a time, each seeing one GPU of its own and running on 1/P of the
physical cores (`benchmarks.placement`), so that no run shares its cores (each record says its share).
Then, alone, on each workload the vendor library, which every run's ratio divides by, and the peer:
`torch.compile` in its max-autotune mode of the vendor's call, the vendor timed beside it (--no-peer: none).
Each run's record is a JSON file under --out (default results/protocol); a run whose file is there is
not run again, so a killed protocol resumes where it stopped.  Then a markdown table per workload set
is printed after a header with the command, device and versions (`benchmarks.protocol_report`), and
written to OUT/summary.md.

--set names a workload set (`benchmarks.workloads`): the study's, the held-out one, both ("all", the
default), or the tensor-core types' ("tensor-cores").
--quick: the first workload of each set, OpEvo only, 1 seed, 64 trials (one short GPU session);
flags given with it still win.  --workloads replaces the sets by the given op/spec names.

--for SECONDS starts no run that would not end within SECONDS, as long as its tuner's recorded runs took on
its workload (else on any; a tuner with none starts while time is left): those under way finish and are
recorded, so a protocol spread over sessions of limited device time stops between runs rather than losing the
runs a kill would cut.  A peer's timing alone starts only if it would end within SECONDS too, as long as its
earlier record took (else the median of those recorded).  The recorded times are medians: give the calls a
margin.

--report runs nothing: it prints (and with --publish, publishes) the report of the records under --out as
far as they go, on any machine, its header saying the versions and dates the records give and how many of
the planned runs they are; --workers auto is then the number the records were run with.

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
import re
import sys
import time
from pathlib import Path
from typing import Any

from experiments import registry
from experiments.write import auto_concurrency, concurrency_arg
from trial.inputs import number_type
from trial.measure import Options, device
from trial.records import Records, RecordsError
from trial.target import KINDS, TargetError
from trial.service.client import ROOT, ServiceError
from trial.workload import SpecError, Workload, parse_name

from . import driver, metaschedule, placement, protocol_jobs, protocol_publish, protocol_report, protocol_run, workloads
from .workloads import Entry

PAGE = ROOT / "docs" / "results.md"
DEFAULTS = {"tuners": ["opevo", "gbfs", "na2c", "random", metaschedule.NAME], "seeds": 5, "trials": 128}
QUICK = {"tuners": ["opevo"], "seeds": 1, "trials": 64}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.protocol", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--quick", action="store_true", help="each set's first workload, opevo, 1 seed, 64 trials")
    p.add_argument("--set", default="all",
                   help="study, held-out, tensor-cores or all (study and held-out; the default)")
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
    p.add_argument("--for", dest="for_s", type=number_type(float, 1, 1e7), metavar="SECONDS",
                   help="start no run or peer timing that would not end within SECONDS, as long as the recorded "
                        "ones took: those under way finish and are recorded, the others wait for the next "
                        "invocation (a session's device time)")
    p.add_argument("--report", action="store_true",
                   help="run nothing: the report of the records under --out as far as they go (no GPU needed)")
    return p


def plan_sets(args: argparse.Namespace) -> dict[str, tuple[Entry, ...]]:
    """The workload sets of the command line; ValueError for an unknown set or a bad spec."""
    if args.workloads:
        return {"given": tuple(workloads.entry(name) for name in args.workloads)}
    chosen = workloads.chosen(args.set)
    if args.quick:
        return {name: (workloads.QUICK[name],) for name in chosen}
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
    them (OpEvo breeds that many offspring at once: `experiments.registry.class_args`); with --report, the
    number the records under --out were run with (ValueError where there are none, or several)."""
    if args.workers != "auto":
        return args.workers
    if args.report:
        found = {int(m.group(1)) for f in args.out.rglob(f"*-t{args.trials}-w*-s*.json")
                 if (m := re.search(r"-w(\d+)-s\d+\.json$", f.name))}
        if len(found) != 1:
            raise ValueError(f"{'no' if not found else 'several'} run records of {args.trials} trials under "
                             f"{args.out} ({', '.join(map(str, sorted(found))) or 'none'} in flight): "
                             f"{'run the protocol first' if not found else 'say which with --workers'}")
        return found.pop()
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


def recorded(entry: Entry, tuner: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The records of `tuner`'s seeds on `entry` that are there."""
    found = (protocol_run.load(protocol_jobs.path((entry, tuner, seed), args)) for seed in range(args.seeds))
    return [record for record in found if record is not None]


def standing(wl: Workload, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Those of `records` that stand on the target each names (`protocol_jobs.current`): a run of a template the
    suite has since replaced there is the next protocol's to run again, and no report's row mixes it in."""
    return [r for r in records if (where := protocol_run.recorded_target(r)) is None
            or protocol_jobs.current(r, wl, where)]


def report(sets: dict[str, tuple[Entry, ...]], args: argparse.Namespace, argv: list[str],
           planned: int) -> tuple[str, list[str], dict[str, dict[str, list[dict[str, Any]]]], int]:
    """The report of the records under --out: its header, a table per set (each run's ratio to its
    workload's vendor figure, `protocol_report.vendor_of`), per set and workload the records the plots show,
    and how many runs of the tuners are recorded."""
    tables, seen, plotted, found_all, runs_found, replaced = [], [], {}, [], 0, 0
    for title, entries in sets.items():
        rows, with_vendor, plotted[title] = [], False, {}
        for entry in entries:
            wl = parse_name(entry.workload)
            every = {tuner: recorded(entry, tuner, args) for tuner in args.tuners}
            runs = {tuner: standing(wl, found) for tuner, found in every.items()}
            replaced += sum(map(len, every.values())) - sum(map(len, runs.values()))
            alone = protocol_run.load(protocol_run.vendor_path(args.out, wl))
            vendor = protocol_report.vendor_of(alone, [r for found in runs.values() for r in found])
            with_vendor |= vendor[0] is not None
            found_all += [alone] if alone else []
            for tuner, found in runs.items():
                found = [{**protocol_report.with_ratio(r, vendor), "template": protocol_run.recorded_template(wl, r)}
                         for r in found]
                found_all += found
                runs_found += len(found)
                seen += [r["device"] for r in found if r.get("device")]
                rows.append(protocol_report.row(entry, tuner, found, vendor))
                plotted[title].setdefault(entry.workload, []).extend(found)
            if not args.no_peer:
                found_peer = protocol_run.load(protocol_run.peer_path(args.out, wl))
                found_all += [found_peer] if found_peer else []
                rows.append(protocol_report.peer_row(entry, protocol_run.PEER, found_peer))
        tables.append(protocol_report.table(title, rows, with_vendor))
    where = _device(args.target, seen) if seen or not args.report else "none recorded"
    head = (protocol_report.recorded_header(argv, where, found_all, runs_found, planned, replaced) if args.report
            else protocol_report.header(argv, where))
    return head, tables, plotted, runs_found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = p.parse_args(argv)
    try:
        resolve(args)
        sets = plan_sets(args)
        records = None if args.report else Records(args.records)
        args.workers = workers(args)
        args.shares = None if args.report else shares(args)
    except (SpecError, ValueError, RecordsError, TargetError, ServiceError) as err:
        p.error(str(err))
    logging.getLogger("nni").setLevel(logging.WARNING)
    options = Options(target=args.target, min_repeat_ms=args.min_repeat_ms)
    args.deadline = time.monotonic() + args.for_s if args.for_s else None
    failed: list[str] = []
    jobs = [(entry, tuner, seed) for entries in sets.values() for entry in entries
            for tuner in args.tuners for seed in range(args.seeds)]
    entries = [entry for found in sets.values() for entry in found]
    ran, timed = (0, 0) if args.report else protocol_jobs.run_all(jobs, entries, args, options, records, failed)
    head, tables, plotted, recorded_runs = report(sets, args, argv, len(jobs))
    text = "\n\n".join([f"# Benchmark protocol\n\n{head}", *tables])
    if failed:
        text += "\n\n**Runs that failed** (not recorded, so run again next time):\n\n" + "".join(
            f"- {line[:500]}\n" for line in failed)
    if not args.report:  # a report of the records leaves their folder as it is
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.md").write_text(text + "\n")
    print(text)
    if args.publish:
        images = protocol_publish.plots(plotted, args.publish.parent / "protocol")
        protocol_publish.publish(args.publish, text, images)
        print(f"wrote the report into {args.publish} and {len(images)} plots beside it", file=sys.stderr)
    wrote = "" if args.report else f"; wrote {args.out / 'summary.md'}"
    left = f"; {len(jobs) - recorded_runs} runs of the tuners not recorded yet" if recorded_runs < len(jobs) else ""
    alone = f" ({timed} vendor or peer timings alone)" if timed else ""
    print(f"{ran} runs measured{alone}, the others read from {args.out}{wrote}{left}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

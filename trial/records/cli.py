"""The records' command line, python -m trial.records: the best recorded kernels, recent measurements, export and NNI import.

    python -m trial.records best mm/N512K1024M1024 -n 5       fastest verified configs on this device
    python -m trial.records list --workload mm/N512K1024M1024 --status invalid
    python -m trial.records import <experiment id or folder>  results of an NNI experiment run elsewhere
    python -m trial.records export mm/N512K1024M1024          library, source, knobs and report
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..inputs import number_type
from ..measure import this_device
from ..workload import SpecError, parse_name
from .export import ExportError, export
from .nni_import import import_experiment
from .store import Record, Records, RecordsError, as_template_takes


def _table(records: list[Record]) -> str:
    lines = [f"{'gflops':>10} {'ms':>10} {'status':13} {'device':28} {'tuner':6} params"]
    for r in records:
        ms = f"{r.latency_ms:.4f}" if r.latency_ms else "-"
        lines.append(f"{r.gflops:10.1f} {ms:>10} {r.status:13} {r.device[:28]:28} {r.tuner or '-':6} "
                     f"{json.dumps(r.params)}" + (f"  ({r.reason[:60]})" if r.reason else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trial.records", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", help="the store (default: $OPEVO_RECORDS or records/records.sqlite)")
    sub = p.add_subparsers(dest="command", required=True)
    device_help = "device name as recorded (default: this machine's; 'any' for all devices)"
    best = sub.add_parser("best", help="the best verified configs of a workload")
    best.add_argument("workload", help="op/spec, e.g. mm/N512K1024M1024")
    best.add_argument("--device", help=device_help)
    best.add_argument("-n", type=number_type(int, 1, 10000), default=1, help="how many distinct configs")
    best.add_argument("--json", action="store_true", help="print JSON records")
    listing = sub.add_parser("list", help="recent measurements")
    listing.add_argument("--workload")
    listing.add_argument("--device")
    listing.add_argument("--status")
    listing.add_argument("--limit", type=number_type(int, 1, 1_000_000), default=20)
    exporting = sub.add_parser("export", help="library, source, knobs and report of the best kernel")
    exporting.add_argument("workload")
    exporting.add_argument("--out", type=Path, help="folder (default: exports/<op>/<spec>)")
    exporting.add_argument("--device", help=device_help)
    importing = sub.add_parser("import", help="add an NNI experiment's results")
    importing.add_argument("experiment", help="experiment id or folder (<experimentWorkingDirectory>/<id>)")
    importing.add_argument("--workload", help="op/spec if the trialCommand does not say")
    importing.add_argument("--nni-dir", type=Path, default=Path.home() / "nni-experiments",
                           help="NNI's experiment folder, for an id (default ~/nni-experiments)")
    for parser in (best, exporting):
        parser.add_argument("--target", default=os.environ.get("OPEVO_TARGET", "auto"),
                            help="which device is this machine's (auto|cuda|rocm|llvm)")
    args = p.parse_args(argv)
    try:
        wl = parse_name(args.workload) if args.workload else None
    except SpecError as err:
        p.error(str(err))
    try:
        store = Records(args.records)
    except RecordsError as err:
        p.error(str(err))

    if args.command == "import":
        folder = Path(args.experiment)
        folder = folder if folder.is_dir() else args.nni_dir / args.experiment
        if not (folder / "db" / "nni.sqlite").exists():
            p.error(f"no NNI experiment at {folder}")
        print(f"{import_experiment(store, folder, args.workload)} records added or updated from {folder}")
        return 0
    if args.command == "list":
        print(_table(store.query(wl and wl.key, args.device, args.status, limit=args.limit)))
        return 0
    device = None if args.device == "any" else (args.device or this_device(args.target))
    found = store.best(wl.key, device, n=args.n if args.command == "best" else 1, fits=as_template_takes(wl))
    if not found:
        print(f"no verified record of {wl.key} on {device or 'any device'} whose knobs fit the template, "
              f"in {store.path}")
        return 1
    if args.command == "best":
        print(json.dumps([r.__dict__ for r in found], indent=1) if args.json else _table(found))
        return 0
    out = args.out or Path("exports") / wl.op / wl.spec
    trials = store.count(wl.key, found[0].device)
    try:
        report = export(wl, found[0], out, args.target, trials=trials)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tuned = report["tuned"]
    print(f"exported to {out}: {tuned['gflops']:.1f} GFLOPS ({tuned['latency_ms']:.4f} ms; recorded "
          f"{found[0].latency_ms:.4f} ms), {report['improvement'] or 0:.2f}x the hand-picked config")
    for name, figures in (("tuned kernel", tuned), ("hand-picked config", report["baseline"])):
        if figures.get("warning"):
            print(f"warning: the {name}'s timing: {figures['warning']}")
    return 0

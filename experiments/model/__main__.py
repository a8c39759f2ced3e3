"""python -m experiments.model tasks|tune|report MODEL: tune a whole model with the suite.

    tasks   trace and profile the model; print its tasks and what cannot be tuned; write tasks.json
    tune    tune the tasks (--trials N | --minutes M), one NNI experiment each, resumable
    report  apply the tuned kernels and print per task and end-to-end timings and the output check;
            the same figures in OUT/report.json

MODEL: path/to/file.py:function, torchvision:NAME, timm:NAME, transformers:TYPE or a .onnx file
(experiments/model/load.py).  A bad model, option, budget or device is a message and exit status 2; an
NNI experiment that fails while tuning is a message and exit status 1 (the manifest keeps what was done).
"""
from __future__ import annotations

import argparse
import gc
import json
import re
import sys
from pathlib import Path

import torch

from trial.inputs import number_type
from trial.records.store import RecordsError
from trial.target import KINDS

from .errors import ModelError
from .load import DEFAULT_SEQ, DTYPES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.model", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("model", help="path/to/file.py:function, torchvision:NAME, timm:NAME, transformers:TYPE or x.onnx")
    common.add_argument("--batch", type=number_type(int, 1, 1 << 20), default=None, help="batch size (default: the model's)")
    common.add_argument("--dtype", choices=DTYPES, default="float32")
    common.add_argument("--target", choices=KINDS, default="auto", help="as a trial's --target")
    common.add_argument("--seq", type=number_type(int, 1, 1 << 20), default=DEFAULT_SEQ,
                        help=f"sequence length of a transformers model (default {DEFAULT_SEQ})")
    common.add_argument("--out", type=Path, default=None,
                        help="folder of tasks.json, the experiments and manifest.json (default models/<model>)")
    sub.add_parser("tasks", parents=[common], help="list the model's tasks and write tasks.json")
    tune = sub.add_parser("tune", parents=[common], help="tune the tasks")
    budget = tune.add_mutually_exclusive_group(required=True)
    budget.add_argument("--trials", type=number_type(int, 1, 10**7), help="trials in all, across tasks")
    budget.add_argument("--minutes", type=number_type(float, 0.1, 10**6), help="minutes in all")
    tune.add_argument("--retune", action="store_true", help="measure tasks the records already hold")
    tune.add_argument("--port", type=number_type(int, 1024, 65535), default=8080,
                      help="the first NNI web-UI port: each running experiment takes one, from this one up")
    report = sub.add_parser("report", parents=[common], help="apply the tuned kernels and report")
    report.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    return parser


def _out(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return args.out
    name = re.sub(r"[^A-Za-z0-9]+", "_", Path(args.model).name if args.model.endswith(".onnx") else args.model)
    return Path("models") / f"{name.strip('_')}_b{args.batch or 'default'}_{args.dtype}"


def _made_by(args: argparse.Namespace, device: str) -> dict[str, object]:
    """The options a task list depends on, as tasks.json keeps them."""
    return {"model": args.model, "dtype": args.dtype, "batch": args.batch, "seq": args.seq, "target": args.target,
            "device": device}


def _tasks(args: argparse.Namespace) -> tuple[object, Path]:
    from .load import load

    model = load(args.model, args.batch, args.dtype, args.target, args.seq)
    if model.onnx is not None:
        from .onnx_tasks import find
    else:
        from .tasks import find
    found = find(model)
    path = _out(args) / "tasks.json"
    found.write(path, made_by=_made_by(args, model.target.device_name))
    return found, path


def _listed(args: argparse.Namespace) -> tuple[list[object], Path]:
    """tune's tasks: those of OUT/tasks.json where the same options made it, else the model profiled now,
    its memory (on the GPU too) given back before the hours of tuning, whose trials need that GPU."""
    from .load import resolve_target
    from .tasks import made_by, read

    path = _out(args) / "tasks.json"
    if made_by(path) == _made_by(args, resolve_target(args.target).device_name):
        print(f"tasks from {path} (profiled before with these options; delete it to profile again)")
        return read(path), path
    found, path = _tasks(args)
    print(f"{len(found.tasks)} tasks ({found.tunable_share:.1%} of the model's time) in {path}")
    gc.collect()  # the model and its tensors, unreferenced once _tasks returned
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    return list(found.tasks), path


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "tasks":
            from .tasks import table

            found, path = _tasks(args)
            print(table(found))
            print(f"\nwrote {path}")
            return 0
        if args.command == "tune":
            from .tune import tune

            listed, path = _listed(args)
            try:
                tune(listed, path.parent, args.trials, args.minutes, target=args.target, retune=args.retune,
                     port=args.port)
            except RuntimeError as err:  # nnictl or the NNI manager failed (manager.nnictl, TunerFailed)
                if isinstance(err, ModelError):
                    raise
                print(f"error: tuning stopped, an NNI experiment failed: {err}\n{path.parent / 'manifest.json'} "
                      "keeps what was done: run the same command again to resume", file=sys.stderr)
                return 1
            return 0
        from .load import load
        from .report import report

        model = load(args.model, args.batch, args.dtype, args.target, args.seq)
        if model.onnx is not None:
            raise ModelError("report runs a PyTorch model: give the model's Python source, not its ONNX file")
        made = report(model, compile=not args.no_compile, say=lambda line: print(line, flush=True))
        path = _out(args) / "report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(made.data, indent=1))
        print(f"\nwrote {path}")
        return 0 if made.output_ok else 1
    except (ModelError, RecordsError, ValueError) as err:  # ValueError: tune's checks, ManifestError
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""python -m experiments.write <op> <spec>: write an experiment folder for a workload.

experiments/<op>/<spec>/ gets search_space.json (the template's knobs) and one NNI v2 config per
suite tuner (config_opevo.yml, config_gbfs.yml, config_na2c.yml, which warm-start from the records
and keep the rules of a device: see tuners/base.py), plus search_space_twin.json (the same space in NNI's standard types, see
searchspace/twin.py) and configs for NNI's built-in TPE, Random and Evolution tuners over it, for
fair comparisons.  Paths in the configs are relative to the config file, so
`nnictl create --config .../config_opevo.yml` works from any folder.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import yaml

from searchspace import ConstrainedSpace, SearchSpace, twin_space
from trial import templates
from trial.archs import ARCHS, target_of
from trial.command import trial_command
from trial.constraints import KernelRules
from trial.inputs import number_type
from trial.measure import device
from trial.remote import LOCAL, add_runner_argument
from trial.target import Target, TargetError
from trial.workload import SpecError, Workload, parse

from .registry import BUILTIN_TUNERS, CONCURRENCY, MAX_TRIALS, TUNERS
from .registry import class_args as registry_class_args

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"


IN_FLIGHT_PER_GPU = 16
"""Trials in flight that keep one GPU busy: it verifies and times about four kernels a second, and a trial
lasts several seconds, most of it its build on a core of its own (docs/results.md: 3.2 trials/s on an
H200 at 16, 0.76 at 4)."""


def auto_concurrency(target: str = "auto", gpus: int | None = None, runner: str = LOCAL) -> int:
    """trialConcurrency for this machine: enough trials in flight for `gpus` GPUs (default: those of
    `target` through `runner`: this machine's, or the servers under an RPC key), no more than the
    measuring service's build workers (one per core) build at once; on a CPU, where a timing has the
    cores to itself, `CONCURRENCY`."""
    if gpus is None:
        here = device(target, runner)
        gpus = here.num_devices if here.is_gpu else 0
    return max(CONCURRENCY, min(os.cpu_count() or 1, IN_FLIGHT_PER_GPU * gpus))


def concurrency_arg(text: str) -> int | str:
    """A --concurrency value: 1 to 1024, or auto."""
    return text if text == "auto" else number_type(int, 1, 1024)(text)


def folder(wl: Workload, root: Path = EXPERIMENTS) -> Path:
    return root / wl.op / wl.spec


def config(wl: Workload, tuner: str, out: Path, max_trials: int = MAX_TRIALS,
           concurrency: int = IN_FLIGHT_PER_GPU, warm_start: bool = True,
           target: str | dict[str, Any] = "auto", runner: str = LOCAL) -> dict[str, Any]:
    """The NNI v2 config of `tuner` for `wl`, with paths relative to the folder `out`.

    `warm_start` and `target` are the suite tuners' classArgs (NNI's built-ins take none): warm start
    False starts them cold, independent of the records (benchmarks); `target` is the device whose rules
    every proposal keeps (see tuners/rules.py).  `runner` goes into the trialCommand (trial/remote.py).
    """
    code = os.path.relpath(ROOT, out)
    builtin = tuner in BUILTIN_TUNERS
    if builtin:
        algo = BUILTIN_TUNERS[tuner]
    else:
        class_args = {**registry_class_args(tuner, concurrency), "warm_start": warm_start, "workload": wl.name,
                      "target": target}
        algo = {**TUNERS[tuner], "classArgs": class_args}
    return {
        "experimentName": f"{wl.op}-{wl.spec}-{tuner}",
        "searchSpaceFile": "search_space_twin.json" if builtin else "search_space.json",
        "trialCommand": trial_command(wl, tuner, runner),
        "trialCodeDirectory": code,
        "trialConcurrency": concurrency,
        "maxTrialNumber": max_trials,
        "tuner": ({"codeDirectory": code, **algo} if "className" in algo else algo),
        "trainingService": {"platform": "local"},
    }


def _target(arch: str | None, runner: str) -> tuple[str | dict[str, Any], Target | None]:
    """The `target` classArg for `arch`, and the device it stands for where that is known now."""
    if arch is None:
        here = device(os.environ.get("OPEVO_TARGET", "auto"), runner)
        return here.describe(), here
    if arch == "auto":
        return "auto", None
    return arch, target_of(arch)


def write(wl: Workload, root: Path = EXPERIMENTS, max_trials: int = MAX_TRIALS,
          concurrency: int = IN_FLIGHT_PER_GPU, warm_start: bool = True, arch: str | None = None,
          runner: str = LOCAL) -> Path:
    """Write the experiment folder of `wl` under `root`; returns the folder.

    `concurrency`: trialConcurrency, by default one GPU's (the checked-in folders'; `auto_concurrency`
    gives this machine's).  `warm_start`: whether the suite tuners' configs warm-start from the records
    (see `config`).
    `arch`: the device whose rules the search keeps: None, the device trials use here (its limits are
    recorded); "auto", whichever device runs the experiment (the tuner asks when it starts); or an
    architecture of trial/archs.py, e.g. "sm_90", for a GPU that is not here.  `runner`: where the
    trials measure (trial/remote.py), written into the trialCommand; with `arch` None, its device
    gives the limits.  NNI's built-in tuners get a twin space that offers only the values the
    device's rules leave possible, as far as NNI's types can say it (not with "auto").
    """
    target, known = _target(arch, runner)
    out = folder(wl, root)
    out.mkdir(parents=True, exist_ok=True)
    template = templates.load(wl, target=known)
    space = template.search_space(wl)
    allowed = None if known is None else ConstrainedSpace.of(
        SearchSpace.from_json(space), KernelRules(wl, template, known)).domains()
    for name, content in (("search_space.json", space), ("search_space_twin.json", twin_space(space, allowed))):
        lines = [f"  {json.dumps(key)}: {json.dumps(knob)}" for key, knob in content.items()]
        (out / name).write_text("{\n" + ",\n".join(lines) + "\n}\n")
    for tuner in [*TUNERS, *BUILTIN_TUNERS]:
        text = yaml.safe_dump(config(wl, tuner, out, max_trials, concurrency, warm_start, target, runner),
                              sort_keys=False)
        header = (f"# Written by `python -m experiments.write {wl.op} {wl.spec}"
                  f"{'' if arch is None else ' --arch ' + arch} --concurrency {concurrency}"
                  f"{'' if runner == LOCAL else ' --runner ' + runner}`.\n")
        (out / f"config_{tuner}.yml").write_text(header + text)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.write", description=__doc__.split("\n\n")[0])
    p.add_argument("op", choices=["mm", "bmm", "conv"])
    p.add_argument("spec")
    p.add_argument("--root", type=Path, default=EXPERIMENTS, help="where experiment folders go")
    p.add_argument("--max-trials", type=number_type(int, 1, 1_000_000), default=MAX_TRIALS)
    p.add_argument("--concurrency", type=concurrency_arg, default="auto",
                   help="trialConcurrency: 1 to 1024, or auto (default): enough trials in flight for this "
                        f"machine's GPUs ({IN_FLIGHT_PER_GPU} a GPU), at most one per core, {CONCURRENCY} on a CPU")
    p.add_argument("--arch", choices=["auto", *ARCHS],
                   help="the device whose limits the search keeps: an architecture, e.g. sm_90, for a GPU that is "
                        "not here, or auto for whichever runs the experiment (default: the device trials use here)")
    add_runner_argument(p)
    args = p.parse_args(argv)
    try:
        wl = parse(args.op, args.spec)
    except SpecError as err:
        p.error(str(err))
    try:
        concurrency = auto_concurrency(os.environ.get("OPEVO_TARGET", "auto"), runner=args.runner) \
            if args.concurrency == "auto" else args.concurrency
        print(write(wl, args.root.resolve(), args.max_trials, concurrency, arch=args.arch, runner=args.runner))
    except TargetError as err:
        p.error(str(err))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""python -m experiments.write <op> <spec>: write an experiment folder for a workload.

experiments/<op>/<spec>/ gets search_space.json (the template's knobs) and one NNI v2 config per
suite tuner (config_opevo.yml, config_gbfs.yml, config_na2c.yml, which warm-start from the records:
see tuners/warmstart.py), plus search_space_twin.json (the same space in NNI's standard types, see
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

from searchspace import twin_space
from trial import templates
from trial.command import trial_command
from trial.workload import SpecError, Workload, parse

from .registry import BUILTIN_TUNERS, CONCURRENCY, MAX_TRIALS, TUNERS

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"


def folder(wl: Workload, root: Path = EXPERIMENTS) -> Path:
    return root / wl.op / wl.spec


def config(wl: Workload, tuner: str, out: Path, max_trials: int = MAX_TRIALS,
           concurrency: int = CONCURRENCY, warm_start: bool = True) -> dict[str, Any]:
    """The NNI v2 config of `tuner` for `wl`, with paths relative to the folder `out`.

    `warm_start` is the suite tuners' classArg (NNI's built-ins take none): False starts them cold,
    independent of the records (benchmarks).
    """
    code = os.path.relpath(ROOT, out)
    builtin = tuner in BUILTIN_TUNERS
    if builtin:
        algo = BUILTIN_TUNERS[tuner]
    else:
        class_args = {**TUNERS[tuner]["classArgs"], "warm_start": warm_start, "workload": wl.name}
        algo = {**TUNERS[tuner], "classArgs": class_args}
    return {
        "experimentName": f"{wl.op}-{wl.spec}-{tuner}",
        "searchSpaceFile": "search_space_twin.json" if builtin else "search_space.json",
        "trialCommand": trial_command(wl, tuner),
        "trialCodeDirectory": code,
        "trialConcurrency": concurrency,
        "maxTrialNumber": max_trials,
        "tuner": ({"codeDirectory": code, **algo} if "className" in algo else algo),
        "trainingService": {"platform": "local"},
    }


def write(wl: Workload, root: Path = EXPERIMENTS, max_trials: int = MAX_TRIALS,
          concurrency: int = CONCURRENCY, warm_start: bool = True) -> Path:
    """Write the experiment folder of `wl` under `root`; returns the folder.

    `warm_start`: whether the suite tuners' configs warm-start from the records (see `config`).
    """
    out = folder(wl, root)
    out.mkdir(parents=True, exist_ok=True)
    space = templates.load(wl.op).search_space(wl)
    for name, content in (("search_space.json", space), ("search_space_twin.json", twin_space(space))):
        lines = [f"  {json.dumps(key)}: {json.dumps(knob)}" for key, knob in content.items()]
        (out / name).write_text("{\n" + ",\n".join(lines) + "\n}\n")
    for tuner in [*TUNERS, *BUILTIN_TUNERS]:
        text = yaml.safe_dump(config(wl, tuner, out, max_trials, concurrency, warm_start), sort_keys=False)
        header = f"# Written by `python -m experiments.write {wl.op} {wl.spec}`.\n"
        (out / f"config_{tuner}.yml").write_text(header + text)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.write", description=__doc__.split("\n\n")[0])
    p.add_argument("op", choices=["mm", "bmm", "conv"])
    p.add_argument("spec")
    p.add_argument("--root", type=Path, default=EXPERIMENTS, help="where experiment folders go")
    p.add_argument("--max-trials", type=int, default=MAX_TRIALS)
    p.add_argument("--concurrency", type=int, default=CONCURRENCY)
    args = p.parse_args(argv)
    try:
        wl = parse(args.op, args.spec)
    except SpecError as err:
        p.error(str(err))
    print(write(wl, args.root.resolve(), args.max_trials, args.concurrency))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How fast the suite's tuners propose, and how many proposals the device can run, without a GPU.

    python -m benchmarks.proposals [WORKLOAD ...] [--arch sm_90] [--tuners opevo gbfs na2c] [--trials 500]

Each tuner runs `--trials` trials through the benchmark driver (NNI's calls, `--workers` in flight)
with the constrained space of `--arch`, against a stand-in for the GPU: the trial's knob check for
that device (`invalid` where it refuses the kernel), else a speed derived from a hash of the
configuration, so that the tuners have something to climb. Printed per workload and tuner: proposals
per second of the time spent inside the tuner (its space's set-up included), and the share of
proposals that pass the knob check. Without workloads it runs the study's eight and awkward shapes.
"""
from __future__ import annotations

import argparse
import zlib
from collections.abc import Callable
from typing import Any

from experiments import registry
from trial import check, templates
from trial.archs import ARCHS, target_of
from trial.inputs import number_type
from trial.results import MeasureResult, Status
from trial.target import Target
from trial.workload import Workload, parse_name

from . import driver
from .handpicked import STUDY

AWKWARD = ("mm/N768K3072M768PTN", "mm/N1000K197M49", "mm/N49K1000M3072PNT", "bmm/B1N197K64M197PTT",
           "conv/N1C3HW224F64K7ST2PD3")
"""Shapes whose dimensions have few or awkward factors (primes, 197, 49, batch 1)."""


def stand_in(wl: Workload, template: Any, target: Target) -> Callable[[dict[str, Any]], MeasureResult]:
    """A GPU stand-in: `invalid` where the knob check refuses the kernel on `target`, else a made-up speed
    (1 to 1000 GFLOPS, fixed per configuration)."""

    def evaluate(params: dict[str, Any]) -> MeasureResult:
        try:
            check.check(wl, template, params, target)
        except check.InvalidConfig as err:
            return MeasureResult(Status.INVALID, reason=str(err), params=params)
        speed = 1.0 + zlib.crc32(repr(sorted(params.items())).encode()) % 1000
        return MeasureResult(Status.OK, params=params, gflops=speed)

    return evaluate


def measure_tuner(name: str, workload: str, arch: str, trials: int, workers: int, seed: int = 0) -> dict[str, Any]:
    """One tuner's run against the stand-in: proposals per second of tuner time, and the valid share."""
    wl = parse_name(workload)
    target = target_of(arch)
    template = templates.load(wl, target=target)
    tuner, _ = driver.make_tuner(name, seed, wl, target, workers)  # classArgs of an experiment of `workers` in flight
    run = driver.drive(tuner, template.search_space(wl), trials, workers, stand_in(wl, template, target))
    valid = sum(t.result.status == Status.OK for t in run.trials)
    return {"workload": workload, "tuner": name, "trials": len(run.trials),
            "per_s": len(run.trials) / run.tuner_s, "valid": valid / len(run.trials)}


def table(rows: list[dict[str, Any]], arch: str) -> str:
    lines = [f"| workload ({arch}) | tuner | proposals | proposals/s | pass the knob check |",
             "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['workload']} | {r['tuner']} | {r['trials']} | {r['per_s']:,.0f} | {100 * r['valid']:.1f} % |"
              for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=[*STUDY, *AWKWARD], help="op/spec (default: study and awkward)")
    parser.add_argument("--arch", default="sm_90", choices=sorted(ARCHS), help="the device whose limits apply")
    parser.add_argument("--tuners", nargs="+", default=list(registry.TUNERS), choices=list(registry.TUNERS))
    parser.add_argument("--trials", type=number_type(int, 1, 100_000), default=500)
    parser.add_argument("--workers", type=number_type(int, 1, 256), default=8, help="trials in flight (NNI's trialConcurrency)")
    args = parser.parse_args(argv)
    rows = [measure_tuner(name, workload, args.arch, args.trials, args.workers)
            for workload in args.workloads for name in args.tuners]
    print(table(rows, args.arch))


if __name__ == "__main__":
    main()

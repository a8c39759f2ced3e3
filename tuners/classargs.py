"""The classArgs every suite tuner takes, checked when the tuner is built.

NNI 3.0 never calls a tuner's `ClassArgsValidator`, so each tuner validates its classArgs in `__init__`
and a bad one fails the experiment at its start with a message that names it.

    optimize_mode  'maximize' (e.g. GFLOPS, the default) or 'minimize' (e.g. seconds).
    seed           seed of the tuner's random generators, for reproducible runs (null).
    warm_start     propose the best recorded configurations first (false); see `tuners.warm`.
    workload       op/spec of the tuned operator, e.g. 'mm/N512K1024M1024'; required with warm_start
                   or target.
    device         the device name the records must have been measured on (default: the device trials
                   use on this machine, of the target $OPEVO_TARGET, else auto).
    warm_size      how many of the best recorded configurations are proposed (8).
    target         the device whose rules every proposal keeps (threads, shared memory, registers, vector
                   widths, see trial/constraints.py): 'auto' (the device trials use on the machine that
                   runs the tuner, asked of its measuring service), an architecture ('sm_90', 'gfx90a',
                   'llvm', ... trial/archs.py) or a device's description as `python -m experiments.write`
                   records it; null searches the whole space.
    sampling       how the tuner draws its random configurations (OpEvo's before it breeds, G-BFS's
                   initial samples, N-A2C's walkers' starts): 'uniform' over the configurations that keep
                   the rules (the default), or 'nearest': a draw from each knob's possible values moved to
                   the nearest configuration that keeps them, so mostly kernels near the device's limits
                   (`searchspace.ConstrainedSpace.sample_nearest`).
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import Any

from searchspace.param import shown
from trial.workload import SpecError, parse_name

from .rules import TargetRules

SAMPLINGS = ("uniform", "nearest")


def positive_int(name: str, value: Any, most: int = 1_000_000) -> int:
    """`value` if it is an int (not a bool) in [1, most]; else a ValueError naming the classArg `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValueError(f"{name} must be an integer from 1 to {most:,}, got {str(value)[:40]}")
    return value


def number_in(name: str, value: Any, low: float, high: float, *, open_low: bool = False,
              open_high: bool = False) -> float:
    """`value` as a float if it is a real number in the interval; else a ValueError naming `name`."""
    ok = (not isinstance(value, bool) and isinstance(value, Real)
          and (low < value if open_low else low <= value) and (value < high if open_high else value <= high))
    if not ok:
        interval = f"{'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
        raise ValueError(f"{name} must be a number in {interval}, got {str(value)[:40]}")
    return float(value)


@dataclass(frozen=True)
class CommonArgs:
    """The validated common classArgs (see the module's table)."""

    maximize: bool
    seed: int | None
    warm_start: bool
    workload_key: str | None
    device: str | None
    warm_size: int
    rules: TargetRules | None
    nearest: bool

    @classmethod
    def parse(cls, optimize_mode: Any = "maximize", seed: Any = None, warm_start: Any = False,
              workload: Any = None, device: Any = None, warm_size: Any = 8, target: Any = None,
              sampling: Any = "uniform") -> CommonArgs:
        if optimize_mode not in ("maximize", "minimize"):
            raise ValueError(f"optimize_mode must be 'maximize' or 'minimize', got {shown(optimize_mode)}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer or null, got {shown(seed)}")
        if not isinstance(warm_start, bool):
            raise ValueError(f"warm_start must be true or false, got {shown(warm_start)}")
        if (warm_start or target is not None) and workload is None:
            raise ValueError("workload (op/spec, e.g. mm/N512K1024M1024) is required "
                             f"{'when warm_start is true' if warm_start else 'with target'}")
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {', '.join(map(repr, SAMPLINGS))}, got {shown(sampling)}")
        if device is not None and (not isinstance(device, str) or not device):
            raise ValueError(f"device must be a device name as the records hold it, or null, got {shown(device)}")
        key = None
        if workload is not None:
            try:
                key = parse_name(workload).key
            except SpecError as err:
                raise ValueError(f"workload must be op/spec, e.g. mm/N512K1024M1024, got {shown(workload)}: {err}") from None
        return cls(optimize_mode == "maximize", seed, warm_start, key, device,
                   positive_int("warm_size", warm_size), None if target is None else TargetRules(workload, target),
                   sampling == "nearest")

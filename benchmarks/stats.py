"""The benchmark protocol's statistics: medians with bootstrap confidence intervals, and time to quality.

A protocol reports each tuner's median over seeds.  With five or so seeds a normal-theory interval means
little, so the interval is scipy's bootstrap of the median (`median_ci`).  How fast a tuner gets close to
its own result is the trial count and the seconds at which a run first reached a fraction of its best
(`time_to_fraction`), from the per-trial arrival times that `benchmarks.driver.drive` records.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
from scipy import stats

from experiments.plots import best_so_far, trials_to

N_RESAMPLES = 9999


def median_ci(values: Sequence[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """The median of `values` and the bounds of its `confidence` bootstrap interval: (median, low, high).

    The interval is scipy.stats.bootstrap's percentile interval (N_RESAMPLES resamples, seeded by `seed` so
    that a table is reproducible).  Percentile, not BCa: BCa needs the jackknife's spread, which is zero
    where the values are all equal (a tuner that finds the same best with every seed), and then yields NaN;
    the percentile interval of equal values is that value.  A single value has no spread to resample: its
    bounds are NaN (no interval), not the value itself, so that one seed never reads as a certain result.
    ValueError for no values, a non-finite value or a confidence outside (0, 1).
    """
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or data.size == 0:
        raise ValueError(f"median_ci needs a non-empty list of numbers, got {values!r}")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"median_ci needs finite numbers, got {values!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    median = float(np.median(data))
    if data.size == 1:
        return median, math.nan, math.nan
    if np.all(data == data[0]):  # scipy warns of degenerate data and gives the value; say it without the warning
        return median, median, median
    found = stats.bootstrap((data,), np.median, n_resamples=N_RESAMPLES, confidence_level=confidence,
                            method="percentile", rng=np.random.default_rng(seed))
    low, high = found.confidence_interval
    return median, float(low), float(high)


class _Result(Protocol):
    status: str
    gflops: float


class _Trial(Protocol):
    index: int
    finished_s: float
    result: _Result


def time_to_fraction(trials: Sequence[_Trial], fraction: float = 0.95) -> tuple[int | None, float | None]:
    """(trials, seconds) at which a run first reached `fraction` of its own best GFLOPS.

    `trials` are a run's `benchmarks.driver.Trial`s in the order their results arrived: `index` (1-based) is
    the trial count, `finished_s` the seconds from the start of the run to that result (so the seconds
    include the tuner's time and the workers' overlap, as a user waits for them).  The best is the run's
    best `ok` measurement; (None, None) where the run has none.  ValueError for a fraction outside (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
    reached = trials_to(fraction, best_so_far([t.result.gflops if t.result.status == "ok" else 0.0 for t in trials]))
    if reached is None:
        return None, None
    first = trials[reached - 1]
    return first.index, first.finished_s

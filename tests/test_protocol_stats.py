"""The protocol's statistics: bootstrap intervals of the median, and time to a fraction of a run's best."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import binom

from benchmarks.stats import median_ci, time_to_fraction


def exact_bounds(sorted_values, confidence):
    """The percentile bootstrap interval of the median of an odd-sized sample, from the exact law of the
    resampled median: it is at most the j-th smallest value when at least (n+1)/2 of n draws are among the j
    smallest, a binomial.  Asserts each quantile lies well away from a jump, so 9999 resamples find it."""
    n = len(sorted_values)
    cdf = [binom.sf((n + 1) // 2 - 1, n, j / n) for j in range(n + 1)]
    bounds = []
    for level in ((1 - confidence) / 2, (1 + confidence) / 2):
        j = next(j for j in range(1, n + 1) if cdf[j] >= level)
        assert cdf[j - 1] < level - 0.005 and cdf[j] > level + 0.005
        bounds.append(sorted_values[j - 1])
    return bounds


@pytest.mark.parametrize("values", [[3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0],
                                    [10.0, 12.5, 9.75, 11.0, 30.0, 10.5, 8.0, 13.0, 9.0, 12.0, 11.5]])
def test_median_ci_is_the_exact_percentile_bootstrap_interval(values):
    median, low, high = median_ci(values)
    assert median == sorted(values)[len(values) // 2]
    assert [low, high] == exact_bounds(sorted(values), 0.95)
    assert min(values) <= low <= median <= high <= max(values)
    assert median_ci(values, seed=1) == median_ci(values, seed=1)  # seeded: a table is reproducible
    narrow = median_ci(values, confidence=0.5)
    assert low <= narrow[1] <= narrow[2] <= high and narrow[1:] == tuple(exact_bounds(sorted(values), 0.5))


def test_median_ci_of_one_value_has_no_interval_and_of_equal_values_a_point():
    median, low, high = median_ci([7.5])
    assert median == 7.5 and math.isnan(low) and math.isnan(high)
    assert median_ci([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    median, low, high = median_ci([1.0, 2.0])
    assert median == 1.5 and 1.0 <= low <= high <= 2.0


@pytest.mark.parametrize("bad, why", [([], "non-empty"), ([1.0, np.nan], "finite"), ([[1.0, 2.0]], "non-empty")])
def test_median_ci_rejects_bad_values(bad, why):
    with pytest.raises(ValueError, match=why):
        median_ci(bad)
    with pytest.raises(ValueError, match="confidence"):
        median_ci([1.0, 2.0], confidence=1.5)


def trial(index, status, gflops, finished_s):
    return SimpleNamespace(index=index, finished_s=finished_s, result=SimpleNamespace(status=status, gflops=gflops))


def test_time_to_fraction_finds_the_first_trial_near_the_runs_best():
    run = [trial(1, "ok", 10.0, 0.5), trial(2, "invalid", 0.0, 0.6), trial(3, "ok", 60.0, 1.75),
           trial(4, "runtime_error", 500.0, 2.0), trial(5, "ok", 96.0, 3.25), trial(6, "ok", 100.0, 4.0),
           trial(7, "ok", 40.0, 5.0)]
    assert time_to_fraction(run) == (5, 3.25)  # 96 >= 0.95 * 100; the failed 500 does not count
    assert time_to_fraction(run, 0.5) == (3, 1.75)
    assert time_to_fraction(run, 1.0) == (6, 4.0)
    assert time_to_fraction(run[:2], 0.95) == (1, 0.5)
    assert time_to_fraction([trial(1, "invalid", 0.0, 0.1)]) == (None, None)
    assert time_to_fraction([]) == (None, None)
    with pytest.raises(ValueError, match="fraction"):
        time_to_fraction(run, 0.0)

"""Statistics over an experiment's span: the host's CPU, each GPU's lock and the rate between the ends."""
import pytest

from benchmarks import spanstats


def test_device_use_is_a_share_of_the_span_the_gaps_between_holds_and_the_ends_per_device():
    spans = [(0, 0.5, 1.0), (0, 1.5, 2.0), (1, 0.0, 3.0), (0, 1.0, 1.25)]  # device 0: 1.25 s held, free 0 and 0.25
    use = spanstats.device_use(spans, 0.0, 3.0)
    assert use["held"] == pytest.approx((1.25 / 3 + 1.0) / 2)
    assert use["free_s"] == pytest.approx(0.125)
    assert use["ends_s"] == pytest.approx((0.5 + 1.0 + 0.0) / 2)  # device 0: 0.5 before, 1.0 after; device 1: none
    assert use["before_s"] == pytest.approx((0.5 + 0.0) / 2)
    assert spanstats.device_use([], 0.0, 2.0) == {"held": None, "free_s": None, "ends_s": None, "before_s": None}
    assert spanstats.device_use([(0, 0.0, 1.0)], 0.0, 1.0)["free_s"] is None  # one hold: no gap between two


def test_steady_rate_leaves_out_a_tenth_of_the_trials_at_each_end():
    # a slow start and a slow end around 1 trial every 0.5 s: the steady rate is the middle's
    ends = [10.0, 20.0] + [20.0 + 0.5 * i for i in range(1, 17)] + [40.0, 60.0]
    assert spanstats.steady_rate(ends) == pytest.approx(2.0)  # from the 3rd end (20.5) to the 18th (28.0): 15 / 7.5
    assert spanstats.steady_rate(ends[:9]) is None  # too few trials for ends to leave out
    assert spanstats.steady_rate([5.0] * 12) is None  # no time between the middle's first and last end
    assert len(ends) / (ends[-1] - ends[0]) < 0.5  # while the whole span's rate is far lower


def test_host_cpu_is_the_busy_rate_between_the_samples_inside_the_span():
    samples = [(0.0, 0.0), (1.0, 100.0), (3.0, 120.0), (5.0, 160.0), (9.0, 999.0)]
    assert spanstats.host_cpu(samples, 0.5, 6.0) == pytest.approx(15.0)  # (160 - 100) / (5 - 1)
    assert spanstats.host_cpu(samples, 2.0, 4.0) is None  # one sample inside: no rate
    assert spanstats.host_busy_s() > 0

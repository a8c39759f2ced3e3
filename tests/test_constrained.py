"""ConstrainedSpace: every configuration it hands out keeps the rules, and samples are (close to) uniform."""
import collections
import random

import pytest

from searchspace import SearchSpace, SpaceError
from searchspace import constrained
from searchspace.constrained import ConstrainedSpace

SPACE = {"X": {"_type": "factor", "_value": [64, 3]}, "Y": {"_type": "factor", "_value": [32, 3]},
         "u": {"_type": "discrete", "_value": [1, 2, 4, 8]}}


class TileRules:
    """A block of X[1]*Y[1] threads (at most `threads`) with u*X[2]*Y[2] values each (at most `regs`)."""

    def __init__(self, threads=16, regs=16):
        self.threads, self.regs = threads, regs

    def uses(self, c):
        return c["X"][1] * c["Y"][1], c["u"] * c["X"][2] * c["Y"][2]

    def excess(self, c):
        t, r = self.uses(c)
        return max(0, t / self.threads - 1) + max(0, r / self.regs - 1)

    def problems(self, c):
        t, r = self.uses(c)
        return [m for m, bad in ((f"{t} threads", t > self.threads), (f"{r} registers", r > self.regs)) if bad]

    def possible(self, name, value):
        least = {"X": [64, 1, 1], "Y": [32, 1, 1], "u": 1}
        return self.excess({**least, name: value}) == 0


def space(rules=None):
    return ConstrainedSpace.of(SearchSpace.from_json(SPACE), rules or TileRules())


def valid_set(s):
    return {s.key(c) for c in SearchSpace.values(s) if s.valid(c)}


def test_everything_handed_out_keeps_the_rules():
    s, rng = space(), random.Random(1)
    plain = SearchSpace.from_json(SPACE)
    for _ in range(200):
        c = s.sample(rng)
        assert s.valid(c) and not s.violations(c)
        assert all(s.valid(n) for n in s.neighbours(c))
        wild = plain.sample(rng)
        assert s.valid(s.repair(wild, rng))
    assert {s.key(c) for c in s.values()} == valid_set(s)


def test_domains_keep_exactly_the_values_some_valid_configuration_takes():
    s = space()
    taken = collections.defaultdict(set)
    for c in SearchSpace.values(s):
        if s.valid(c):
            for name, p in s.params.items():
                taken[name].add(p.key(c[name]))
    for name, values in s.domains().items():
        assert {s[name].key(v) for v in values} == taken[name]


@pytest.mark.parametrize("tries", [constrained.REJECTION_TRIES, 0])
def test_samples_are_uniform_over_the_valid_configurations(tries, monkeypatch):
    """By rejection (exact), and by repair and a Metropolis-Hastings walk when rejection is given up
    (close: every valid configuration drawn, no cell far from its share)."""
    monkeypatch.setattr(constrained, "REJECTION_TRIES", tries)
    s, rng = space(), random.Random(7)
    cells = valid_set(s)
    draws = 20 * len(cells)
    counts = collections.Counter(s.key(s.sample(rng)) for _ in range(draws))
    assert set(counts) == cells
    expected = draws / len(cells)
    statistic = sum((counts[k] - expected) ** 2 / expected for k in cells)
    # chi-square with len(cells)-1 degrees of freedom: mean len(cells); exact sampling stays well below 2x
    assert statistic < (2.0 if tries else 4.0) * len(cells), (statistic, len(cells))


def test_nearest_samples_keep_the_rules_and_lean_to_their_limits():
    """`sample_nearest` hands out valid configurations, more of them at a limit than uniform sampling does;
    on a plain space it is uniform sampling."""
    s, rng = space(), random.Random(3)
    rules = TileRules()

    def at_limit(c):
        threads, regs = rules.uses(c)
        return threads == rules.threads or regs == rules.regs

    nearest = [s.sample_nearest(rng) for _ in range(400)]
    uniform = [s.sample(rng) for _ in range(400)]
    assert all(s.valid(c) for c in nearest)
    assert sum(map(at_limit, nearest)) > 1.3 * sum(map(at_limit, uniform))
    plain = SearchSpace.from_json(SPACE)
    assert plain.sample_nearest(random.Random(9)) == plain.sample(random.Random(9))


def test_a_device_too_small_for_any_configuration_is_a_clear_error():
    s = space(TileRules(threads=0.5))
    with pytest.raises(SpaceError, match="no value can keep the rules"):
        s.sample(random.Random(0))
    with pytest.raises(SpaceError, match="found no configuration that keeps the rules"):
        s.repair(SearchSpace.from_json(SPACE).sample(random.Random(0)), random.Random(0))

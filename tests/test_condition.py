"""Conditional parameters (`_when`): a family's knobs matter only under its choice; inert values are one kernel."""
from __future__ import annotations

import itertools
import random

import pytest

from space_strategies import reachable

from searchspace import ConstrainedSpace, SearchSpace, SpaceError, from_twin, twin_space

FAMILIES = {
    "algorithm": {"_type": "choice", "_value": ["direct", "winograd", "fft"]},
    "tile": {"_type": "factor", "_value": [12, 2], "_when": {"algorithm": ["direct"]}},
    "unroll": {"_type": "discrete", "_value": [0, 16, 64]},
    "wino": {"_type": "discrete", "_value": [1, 2, 4, 8], "_when": {"algorithm": ["winograd", "fft"]}},
    "order": {"_type": "perm", "_value": [3], "_when": {"algorithm": ["fft"]}},
}


@pytest.fixture
def space() -> SearchSpace:
    return SearchSpace.from_json(FAMILIES)


def every_config(space: SearchSpace):
    """All combinations of all values, inert ones included."""
    names = space.names
    for combo in itertools.product(*(space[n].values() for n in names)):
        yield dict(zip(names, combo))


def test_size_counts_kernels_not_inert_values(space):
    # direct: 6 tilings; winograd: 4; fft: 4 x 6 orders; times 3 unroll values
    assert space.size == 3 * (6 + 4 + 24)
    assert len({space.key(c) for c in every_config(space)}) == space.size


def test_values_lists_each_kernel_once(space):
    listed = list(space.values())
    assert len(listed) == space.size == len({space.key(c) for c in listed})
    assert all(space.contains(c) for c in listed)


def test_inert_values_do_not_change_the_key_or_the_encoding(space):
    direct = {"algorithm": "direct", "tile": [3, 4], "unroll": 16, "wino": 1, "order": [0, 1, 2]}
    other_inert = {**direct, "wino": 8, "order": [2, 0, 1]}
    assert space.key(direct) == space.key(other_inert)
    assert space.encode(direct) == space.encode(other_inert)
    assert space.key({**direct, "tile": [6, 2]}) != space.key(direct)


def test_moves_leave_inert_parameters_alone(space):
    config = {"algorithm": "winograd", "tile": [3, 4], "unroll": 16, "wino": 2, "order": [0, 1, 2]}
    changed = {n for c in space.neighbours(config) for n in c if c[n] != config[n]}
    assert changed == {"algorithm", "unroll", "wino"}
    for name, move in space.moves():
        moved = space.moved(config, move=(name, move))
        assert (moved is None) if name in ("tile", "order") else True


def test_a_switch_of_family_keeps_that_familys_values(space):
    config = {"algorithm": "winograd", "tile": [3, 4], "unroll": 16, "wino": 2, "order": [0, 1, 2]}
    direct = next(c for c in space.neighbours(config) if c["algorithm"] == "direct")
    assert direct["tile"] == [3, 4]


def test_walks_reach_every_kernel(space):
    """The neighbour graph over kernels stays connected with inert moves left out."""
    assert len(reachable(space.least(), space.neighbours, space.key)) == space.size


def test_least_of_a_conditional_parameter_makes_it_active(space):
    assert space.least()["algorithm"] == "direct"
    assert space.least("wino")["algorithm"] == "winograd"
    assert space.least("order")["algorithm"] == "fft"
    assert space.active("order", space.least("order")) and not space.active("order", space.least())


def test_with_inert_fills_in_only_missing_inert_parameters(space):
    direct = {"algorithm": "direct", "tile": [3, 4], "unroll": 16}
    completed = space.with_inert(direct)
    assert completed == {**direct, "wino": 1, "order": [0, 1, 2]} and space.contains(completed)
    assert direct == {"algorithm": "direct", "tile": [3, 4], "unroll": 16}  # not changed in place
    assert space.with_inert({**direct, "wino": 8}) == {**completed, "wino": 8}
    fft = {"algorithm": "fft", "unroll": 16, "wino": 2}  # `order` is active: still missing
    assert space.with_inert(fft) == {**fft, "tile": [12, 1]}
    for undecided in ({"tile": [3, 4]}, {"algorithm": "spectral"}):
        assert space.with_inert(undecided) == undecided


def test_json_round_trip_keeps_conditions(space):
    assert space.to_json() == FAMILIES
    assert SearchSpace.from_json(space.to_json()).conditions == space.conditions


def test_twin_is_flat_and_decodes(space):
    """NNI's built-in tuners get the flat space (they draw inert values too, which measure one kernel)."""
    twin = twin_space(space)
    assert all(set(entry) == {"_type", "_value"} for entry in twin.values())
    config = {"algorithm": "fft", "tile": [3, 4], "unroll": 16, "wino": 2, "order": [2, 0, 1]}
    encoded = {"algorithm": "fft", "tile": "3x4", "unroll": 16, "wino": 2, "order": "2-0-1"}
    assert from_twin(space, encoded) == config


def test_constrained_space_keeps_conditions():
    class NoDirectTileOf12:
        def excess(self, c):
            return float(c["algorithm"] == "direct" and c["tile"][1] == 12)

        def problems(self, c):
            return ["tile 12"] if self.excess(c) else []

        def possible(self, name, value):
            return True

    space = ConstrainedSpace.of(SearchSpace.from_json(FAMILIES), NoDirectTileOf12())
    assert space.conditions == SearchSpace.from_json(FAMILIES).conditions
    assert space.size == 3 * (5 + 4 + 24)
    rng = random.Random(1)
    samples = [space.sample(rng) for _ in range(200)]
    assert all(space.valid(c) for c in samples)
    assert {c["algorithm"] for c in samples} == {"direct", "winograd", "fft"}


@pytest.mark.parametrize("when,message", [
    ([1], "must be an object naming one choice parameter"),
    ({"algorithm": ["direct"], "unroll": [0]}, "must be an object naming one choice parameter"),
    ({"nothing": ["direct"]}, "not another choice parameter"),
    ({"unroll": [0]}, "not another choice parameter"),
    ({"algorithm": []}, "non-empty list of algorithm's choices"),
    ({"algorithm": ["spectral"]}, "non-empty list of algorithm's choices"),
    ({"algorithm": ["fft", "fft"]}, "lists a choice of algorithm twice"),
])
def test_bad_conditions_are_rejected_with_the_parameter_named(when, message):
    bad = {**FAMILIES, "wino": {**FAMILIES["wino"], "_when": when}}
    with pytest.raises(SpaceError, match=f"^wino: .*{message}"):
        SearchSpace.from_json(bad)


def test_the_deciding_choice_is_unconditional():
    bad = {**FAMILIES, "mode": {"_type": "choice", "_value": ["a", "b"], "_when": {"algorithm": ["direct"]}},
           "x": {"_type": "discrete", "_value": [1, 2], "_when": {"mode": ["a"]}}}
    with pytest.raises(SpaceError, match="^x: its condition's choice mode has a _when of its own"):
        SearchSpace.from_json(bad)

"""Neighbour graphs, moves and q-random walks of every parameter type and of whole spaces."""
from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from space_strategies import MIXED, params, reachable

from searchspace import Choice, Discrete, Factor, Perm, SearchSpace


# ---- neighbour graphs and q-random walks -----------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(params(), st.integers(0, 2**32))
def test_neighbours_are_valid_distinct_and_symmetric(param, seed: int) -> None:
    value = param.sample(random.Random(seed))
    options = param.neighbours(value)
    keys = [param.key(v) for v in options]
    assert len(set(keys)) == len(keys)
    assert param.key(value) not in keys
    for option in options:
        assert param.check(option) is None
        assert param.key(value) in {param.key(v) for v in param.neighbours(option)}


@settings(max_examples=60, deadline=None)
@given(params(), st.integers(0, 2**32))
def test_neighbour_graph_is_connected(param, seed: int) -> None:
    if param.size > 2000:
        return
    assert len(reachable(param.sample(random.Random(seed)), param.neighbours, param.key)) == param.size


def test_neighbour_moves_per_type() -> None:
    assert sorted(Factor.from_value("t", [12, 2]).neighbours([4, 3])) == [[2, 6], [12, 1]]
    assert sorted(Factor.from_value("t", [12, 3]).neighbours([2, 6, 1])) == [[1, 6, 2], [1, 12, 1], [2, 2, 3], [2, 3, 2], [4, 3, 1], [6, 2, 1]]
    assert Discrete.from_value("u", [0, 16, 64, 512]).neighbours(16) == [0, 64]
    assert Discrete.from_value("u", [0, 16, 64, 512]).neighbours(512) == [64]
    assert Choice.from_value("v", [1, 2, 4]).neighbours(2) == [1, 4]
    assert sorted(Perm.from_value("o", [3]).neighbours([0, 1, 2])) == [[0, 2, 1], [1, 0, 2], [2, 1, 0]]


@settings(max_examples=150, deadline=None)
@given(params(), st.integers(0, 2**32), st.floats(0.05, 1.0))
def test_mutation_stays_valid(param, seed: int, q: float) -> None:
    rng = random.Random(seed)
    value = param.sample(rng)
    for _ in range(5):
        value = param.mutate(value, rng, q=q)
        assert param.check(value) is None


def test_walk_step_count_is_geometric() -> None:
    # On a two-value choice the walk ends where it started iff it took an even number of moves:
    # P = sum_k q (1-q)^(2k) = 1 / (2 - q).
    param = Choice.from_value("v", ["a", "b"])
    rng = random.Random(7)
    for q in (0.3, 0.5, 0.8):
        stay = sum(param.mutate("a", rng, q=q) == "a" for _ in range(6000)) / 6000
        assert abs(stay - 1 / (2 - q)) < 0.03


def test_walk_with_q_one_never_moves_and_does_not_alias() -> None:
    param = Factor.from_value("t", [64, 3])
    value = [4, 4, 4]
    out = param.mutate(value, random.Random(0), q=1.0)
    assert out == value and out is not value
    with pytest.raises(ValueError):
        param.mutate(value, random.Random(0), q=0.0)


def test_walks_prefer_nearby_values() -> None:
    param = Discrete.from_value("u", list(range(21)))
    rng = random.Random(3)
    distances = collections.Counter(abs(param.mutate(10, rng, q=0.5) - 10) for _ in range(4000))
    assert distances[0] > distances[1] > distances[3] > distances[6]


def test_space_neighbours_change_one_parameter_by_one_move() -> None:
    space = SearchSpace.from_json(MIXED)
    config = space.sample(random.Random(5))
    options = space.neighbours(config)
    assert len(options) == sum(len(space[n].neighbours(config[n])) for n in space.names)
    for option in options:
        changed = [n for n in space.names if option[n] != config[n]]
        assert len(changed) == 1
        name = changed[0]
        assert space[name].key(option[name]) in {space[name].key(v) for v in space[name].neighbours(config[name])}


@settings(max_examples=200, deadline=None)
@given(params(), st.integers(0, 2**32))
def test_moves_that_apply_lead_to_exactly_the_neighbours(param, seed: int) -> None:
    value = param.sample(random.Random(seed))
    action_set = param.moves()
    assert len(action_set) == len(set(action_set))
    reached = [k for m in action_set if (k := param.key(param.move(value, m))) != param.key(value)]
    assert len(reached) == len(set(reached))
    assert sorted(reached) == sorted(param.key(v) for v in param.neighbours(value))


def test_space_moves_are_the_parameters_moves_in_order() -> None:
    space = SearchSpace.from_json(MIXED)
    assert space.moves() == [(n, m) for n in space.names for m in space[n].moves()]
    config = space.sample(random.Random(2))
    moved = [c for move in space.moves() if (c := space.moved(config, move)) is not None]
    assert sorted(map(space.key, moved)) == sorted(map(space.key, space.neighbours(config)))
    assert space.moved(config, ("vec", (space["vec"].key(config["vec"]),))) is None

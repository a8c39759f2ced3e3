"""The search-space model: sizes, neighbour graphs, q-random walks, encodings, validation messages."""
from __future__ import annotations

import collections
import itertools
import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner_harness import MATMUL

from searchspace import MAX_ENUMERATION, Choice, Discrete, Factor, Perm, SearchSpace, SpaceError

MIXED = {
    "K": {"_type": "factor", "_value": [1024, 3]},
    "X": {"_type": "factor", "_value": [512, 4]},
    "unroll": {"_type": "discrete", "_value": [0, 16, 64, 512]},
    "vec": {"_type": "choice", "_value": [1, 2, 4]},
    "order": {"_type": "perm", "_value": [3]},
}


def brute_force_factorisations(product: int, parts: int) -> set[tuple[int, ...]]:
    divisors = [d for d in range(1, product + 1) if product % d == 0]
    out = set()
    for head in itertools.product(divisors, repeat=parts - 1):
        rest, remainder = divmod(product, math.prod(head))
        if remainder == 0:
            out.add((*head, rest))
    return out


factor_specs = st.tuples(st.integers(1, 3000), st.integers(1, 4))
choice_specs = st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans(), st.none(),
                                  st.lists(st.integers(0, 3), max_size=2)),
                        min_size=1, max_size=6, unique_by=lambda v: json.dumps(v))
discrete_specs = st.lists(st.integers(-1000, 1000), min_size=1, max_size=8, unique=True).map(sorted)


@st.composite
def params(draw):
    kind = draw(st.sampled_from(["factor", "choice", "discrete", "perm"]))
    if kind == "factor":
        return Factor.from_value("p", list(draw(factor_specs)))
    if kind == "choice":
        return Choice.from_value("p", draw(choice_specs))
    if kind == "discrete":
        return Discrete.from_value("p", draw(discrete_specs))
    return Perm.from_value("p", [draw(st.integers(1, 5))])


# ---- sizes and enumeration ----------------------------------------------------------------------------

@pytest.mark.parametrize("product", [1, 2, 7, 12, 36, 60, 64, 97, 210, 360])
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_factor_size_matches_brute_force(product: int, parts: int) -> None:
    factor = Factor.from_value("t", [product, parts])
    expected = brute_force_factorisations(product, parts)
    assert factor.size == len(expected)
    values = factor.values()
    assert len(values) == len(expected)
    assert {tuple(v) for v in values} == expected


@settings(max_examples=60, deadline=None)
@given(factor_specs)
def test_factor_size_formula_property(spec: tuple[int, int]) -> None:
    product, parts = spec
    assert Factor.from_value("t", [product, parts]).size == len(brute_force_factorisations(product, parts))


def test_known_sizes() -> None:
    space = SearchSpace.from_json(MATMUL)
    assert [space[n].size for n in space.names] == [66, 220, 286, 4, 3]
    assert space.size == 66 * 220 * 286 * 4 * 3
    assert Perm.from_value("o", [4]).size == 24


def test_size_is_exact_beyond_64_bits() -> None:
    spec = {f"t{i}": {"_type": "factor", "_value": [2**20, 4]} for i in range(6)}
    space = SearchSpace.from_json(spec)
    assert space.size == math.comb(23, 3) ** 6
    assert space.size > 2**64 and isinstance(space.size, int)


def test_space_values_enumerates_every_configuration_once() -> None:
    space = SearchSpace.from_json({"a": {"_type": "factor", "_value": [12, 2]},
                                   "b": {"_type": "choice", "_value": ["x", {"y": 1}]},
                                   "c": {"_type": "perm", "_value": [3]},
                                   "d": {"_type": "discrete", "_value": [1, 2.5]}})
    configs = list(space.values())
    assert len(configs) == space.size == 6 * 2 * 6 * 2
    assert len({space.key(c) for c in configs}) == space.size
    assert all(space.contains(c) for c in configs)


def test_values_refuses_huge_spaces() -> None:
    space = SearchSpace.from_json(MATMUL)
    assert space.size > MAX_ENUMERATION
    with pytest.raises(ValueError, match="too many"):
        space.values()
    with pytest.raises(ValueError, match="order"):
        Perm.from_value("order", [10]).values()


# ---- sampling --------------------------------------------------------------------------------------

def test_factor_sampling_is_uniform() -> None:
    factor = Factor.from_value("t", [36, 3])
    rng = random.Random(1)
    counts = collections.Counter(tuple(factor.sample(rng)) for _ in range(36_000))
    assert set(counts) == {tuple(v) for v in factor.values()}
    assert min(counts.values()) > 800 and max(counts.values()) < 1200


@settings(max_examples=150, deadline=None)
@given(params(), st.integers(0, 2**32))
def test_samples_are_valid_and_plain_json(param, seed: int) -> None:
    value = param.sample(random.Random(seed))
    assert param.check(value) is None
    assert json.loads(json.dumps(value)) == value


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
    start = param.sample(random.Random(seed))
    seen = {param.key(start)}
    frontier = [start]
    while frontier:
        for option in param.neighbours(frontier.pop()):
            if param.key(option) not in seen:
                seen.add(param.key(option))
                frontier.append(option)
    assert len(seen) == param.size


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


# ---- keys and encodings ----------------------------------------------------------------------------

def test_key_is_canonical() -> None:
    space = SearchSpace.from_json(MIXED)
    config = space.sample(random.Random(2))
    as_tuples = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
    roundtrip = json.loads(json.dumps(config))
    assert space.key(config) == space.key(as_tuples) == space.key(roundtrip)
    hash(space.key(config))
    with pytest.raises(SpaceError):
        space.key({**config, "vec": 3})


def test_choice_tells_json_values_apart() -> None:
    choice = Choice.from_value("v", [1, 1.0, True, "1"])
    assert [choice.key(v) for v in (1, 1.0, True, "1")] == [0, 1, 2, 3]
    assert choice.check(2) is not None


def test_encodings_have_fixed_width_and_are_injective() -> None:
    space = SearchSpace.from_json({"a": {"_type": "factor", "_value": [24, 3]},
                                   "b": {"_type": "choice", "_value": ["x", "y", "z"]},
                                   "c": {"_type": "discrete", "_value": [0, 16, 64]},
                                   "d": {"_type": "perm", "_value": [3]}})
    encodings = [space.encode(c) for c in space.values()]
    assert all(len(e) == space.encode_width == 3 + 3 + 1 + 9 for e in encodings)
    assert all(0.0 <= x <= 1.0 for e in encodings for x in e)
    assert len({tuple(e) for e in encodings}) == space.size


# ---- validation ------------------------------------------------------------------------------------

def valid_config() -> dict:
    return {"K": [16, 16, 4], "X": [1, 8, 8, 8], "unroll": 16, "vec": 2, "order": [2, 0, 1]}


def test_valid_config_passes() -> None:
    space = SearchSpace.from_json(MIXED)
    space.validate(valid_config())
    assert space.contains(valid_config())


@pytest.mark.parametrize("change, message", [
    ({"K": [16, 8, 4]}, "K: factors [16, 8, 4] multiply to 512, expected 1024"),
    ({"K": [32, 32]}, "K: expected 3 factors, got 2"),
    ({"K": [1024, 1, 1.0]}, "K: factors must be positive integers"),
    ({"K": [-16, -16, 4]}, "K: factors must be positive integers"),
    ({"K": "16x16x4"}, "K: expected a list of 3 factors of 1024"),
    ({"unroll": 32}, "unroll: 32 is not one of the values [0, 16, 64, 512]"),
    ({"unroll": True}, "unroll: True is not one of the values"),
    ({"vec": 3}, "vec: 3 is not one of the choices [1, 2, 4]"),
    ({"vec": "2"}, "vec: '2' is not one of the choices"),
    ({"order": [0, 0, 1]}, "order: expected a permutation of range(3)"),
    ({"order": [0, 1]}, "order: expected a permutation of range(3)"),
    ({"tile": 4}, "tile: unknown parameter"),
])
def test_validate_names_the_parameter_and_the_problem(change: dict, message: str) -> None:
    space = SearchSpace.from_json(MIXED)
    config = {**valid_config(), **change}
    with pytest.raises(SpaceError) as info:
        space.validate(config)
    assert message in str(info.value)
    assert not space.contains(config)


def test_validate_reports_missing_keys_and_every_problem() -> None:
    space = SearchSpace.from_json(MIXED)
    config = valid_config()
    del config["X"]
    config["vec"] = 8
    with pytest.raises(SpaceError) as info:
        space.validate(config)
    assert "X: missing" in str(info.value) and "vec: 8 is not one of the choices" in str(info.value)
    with pytest.raises(SpaceError, match="configuration must be an object"):
        space.validate([1, 2, 3])


@pytest.mark.parametrize("entry, message", [
    ({"_type": "uniform", "_value": [0, 1]}, "unknown _type 'uniform'"),
    ({"_value": [1024, 3]}, "missing _type"),
    ({"_type": "factor"}, "missing _value"),
    ({"_type": "factor", "_value": [0, 3]}, "product must be >= 1"),
    ({"_type": "factor", "_value": [1024, 0]}, "parts must be >= 1"),
    ({"_type": "factor", "_value": [1024]}, "must be [product, parts]"),
    ({"_type": "factor", "_value": [1024.0, 3]}, "must be [product, parts]"),
    ({"_type": "choice", "_value": []}, "non-empty list"),
    ({"_type": "choice", "_value": [1, 2, 1]}, "listed twice"),
    ({"_type": "discrete", "_value": []}, "non-empty list"),
    ({"_type": "discrete", "_value": [1, "2", 4]}, "finite numbers"),
    ({"_type": "discrete", "_value": [1, True]}, "finite numbers"),
    ({"_type": "discrete", "_value": [64, 16]}, "sorted ascending"),
    ({"_type": "discrete", "_value": [16, 16]}, "sorted ascending"),
    ({"_type": "perm", "_value": [0]}, "n must be >= 1"),
    ({"_type": "perm", "_value": [3, 4]}, "must be [n]"),
    ([1, 2, 3], "expected an object with _type and _value"),
])
def test_bad_spaces_name_the_parameter(entry, message: str) -> None:
    with pytest.raises(SpaceError) as info:
        SearchSpace.from_json({"vec": {"_type": "choice", "_value": [1, 2]}, "tile": entry})
    assert str(info.value).startswith("tile: ")
    assert message in str(info.value)


def test_space_level_errors() -> None:
    with pytest.raises(SpaceError, match="no parameters"):
        SearchSpace.from_json({})
    with pytest.raises(SpaceError, match="JSON object"):
        SearchSpace.from_json([MIXED])
    assert issubclass(SpaceError, ValueError)


def test_load_and_to_json_round_trip(tmp_path) -> None:
    path = tmp_path / "search_space.json"
    path.write_text(json.dumps(MIXED))
    space = SearchSpace.load(path)
    assert space.names == ["K", "X", "unroll", "vec", "order"]
    assert space.to_json() == MIXED
    assert SearchSpace.from_json(space.to_json()).size == space.size

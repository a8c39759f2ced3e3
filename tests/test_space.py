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

from space_strategies import MIXED, factor_specs, params

from searchspace import MAX_ENUMERATION, Choice, Factor, Perm, SearchSpace, SpaceError
from searchspace.param import copied

def brute_force_factorisations(product: int, parts: int) -> set[tuple[int, ...]]:
    divisors = [d for d in range(1, product + 1) if product % d == 0]
    out = set()
    for head in itertools.product(divisors, repeat=parts - 1):
        rest, remainder = divmod(product, math.prod(head))
        if remainder == 0:
            out.add((*head, rest))
    return out


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
    choice = Choice.from_value("v", [1, 1.0, True, "1", 0.0, -0.0, [1, 2]])
    for _ in range(2):  # the second time through the texts the choice remembers
        assert [choice.key(v) for v in (1, 1.0, True, "1", 0.0, -0.0, [1, 2])] == [0, 1, 2, 3, 4, 5, 6]
        assert [choice.key(v) for v in (True, 1.0, 1)] == [2, 1, 0]
    assert choice.check(2) is not None and choice.check(False) is not None


def test_copied_values_share_nothing_mutable() -> None:
    value = [1, [2, {"a": [3]}], "s", None, 1.5, (4, [5])]
    twin = copied(value)
    assert twin == value and twin is not value
    assert twin[1] is not value[1] and twin[1][1]["a"] is not value[1][1]["a"] and twin[5][1] is not value[5][1]
    assert copied(7) == 7 and copied("x") == "x"


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
    ({"_type": "factor", "_value": [0, 3]}, "product must be between 1 and"),
    ({"_type": "factor", "_value": [1024, 0]}, "parts must be between 1 and 8"),
    ({"_type": "factor", "_value": [1024]}, "must be [product, parts]"),
    ({"_type": "factor", "_value": [1024.0, 3]}, "must be [product, parts]"),
    ({"_type": "choice", "_value": []}, "list of 1 to 4096 values"),
    ({"_type": "choice", "_value": [1, 2, 1]}, "listed twice"),
    ({"_type": "discrete", "_value": []}, "list of 1 to 4096 numbers"),
    ({"_type": "discrete", "_value": [1, "2", 4]}, "finite numbers"),
    ({"_type": "discrete", "_value": [1, True]}, "finite numbers"),
    ({"_type": "discrete", "_value": [64, 16]}, "sorted ascending"),
    ({"_type": "discrete", "_value": [16, 16]}, "sorted ascending"),
    ({"_type": "perm", "_value": [0]}, "n must be between 1 and 10"),
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

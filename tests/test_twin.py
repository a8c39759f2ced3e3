"""Twin spaces: NNI's own validation and built-in tuners accept them, and `from_twin` maps back into the space."""
from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from nni.algorithms.hpo.evolution_tuner import EvolutionTuner
from nni.algorithms.hpo.gridsearch_tuner import GridSearchTuner
from nni.algorithms.hpo.random_tuner import RandomTuner
from nni.algorithms.hpo.tpe_tuner import TpeTuner
from nni.common.hpo_utils import format_search_space, validate_search_space
from nni.tuner import Tuner
from tuner_harness import BMM, CONV, MM, ORDERED

from searchspace import MARKER, TWIN_MAX_CHOICES, SearchSpace, SpaceError, from_twin, twin_space

LARGE = {
    "T": {"_type": "factor", "_value": [2**10 * 3**4 * 5**2, 4]},  # 100100 values: one choice per prime
    "U": {"_type": "factor", "_value": [2**24 * 3, 8]},  # 2**24 over 8 parts is too many splits: weights
    "order": {"_type": "perm", "_value": [8]},  # 40320 orderings: Lehmer code
    "loop": {"_type": "perm", "_value": [4]},
    "blob": {"_type": "choice", "_value": [[1, 2], {"a": 1}, None, "x", 3, True]},
    "scale": {"_type": "discrete", "_value": [0, 0.5, 2]},
    "K": {"_type": "factor", "_value": [1024, 3]},
}
SPACES = {"mm": MM, "bmm": BMM, "conv": CONV, "perm": ORDERED, "large": LARGE}


def sample_twin(twin: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """What a random tuner would propose: one option of every twin choice, JSON round-tripped like NNI does."""
    return json.loads(json.dumps({name: rng.choice(spec["_value"]) for name, spec in twin.items()}))


@pytest.mark.parametrize("name", SPACES)
def test_twin_passes_nni_validation(name: str) -> None:
    twin = twin_space(SPACES[name])
    assert validate_search_space(twin, raise_exception=True)
    assert len(format_search_space(twin)) == len(twin)
    assert json.loads(json.dumps(twin)) == twin  # writable as a searchSpaceFile
    assert all(spec["_type"] == "choice" and len(spec["_value"]) <= TWIN_MAX_CHOICES for spec in twin.values())


def test_small_parameters_keep_one_twin_each() -> None:
    twin = twin_space(MM)
    assert list(twin) == list(MM)
    assert twin["K"]["_value"][:3] == ["1024x1x1", "512x2x1", "512x1x2"]
    assert len(twin["Y"]["_value"]) == SearchSpace.from_json(MM)["Y"].size == 286
    assert twin["unroll"] == {"_type": "choice", "_value": [0, 16, 64, 512, 1500]}
    assert twin_space(CONV)["unroll_explicit"] == CONV["unroll_explicit"]


def test_large_parameters_are_split() -> None:
    twin = twin_space(LARGE)
    assert {"T:2", "T:3", "T:5", "U:3"} <= twin.keys() and "T" not in twin and "U" not in twin
    assert len(twin["T:2"]["_value"]) == math.comb(13, 3)
    assert [f"U:2:{i}" for i in range(8)] == [k for k in twin if k.startswith("U:2:")]
    assert twin["U:2:0"]["_value"] == list(range(25))
    assert [len(twin[f"order:{i}"]["_value"]) for i in range(7)] == [8, 7, 6, 5, 4, 3, 2]
    assert len(twin["loop"]["_value"]) == 24


@pytest.mark.parametrize("name", SPACES)
def test_random_twin_configs_decode_into_the_space(name: str) -> None:
    space, twin, rng = SearchSpace.from_json(SPACES[name]), twin_space(SPACES[name]), random.Random(0)
    for _ in range(100):
        config = from_twin(space, sample_twin(twin, rng))
        space.validate(config)
        assert list(config) == space.names


@pytest.mark.parametrize("name", SPACES)
def test_native_configs_pass_through_unchanged(name: str) -> None:
    space, rng = SearchSpace.from_json(SPACES[name]), random.Random(1)
    for _ in range(50):
        config = json.loads(json.dumps(space.sample(rng)))
        assert from_twin(space, config) == config
        assert from_twin(SPACES[name], config) == config  # the JSON works as well as the model


def test_exact_encodings_decode_to_the_named_value() -> None:
    space = SearchSpace.from_json(LARGE)
    native = {"T": [40, 6, 60, 144], "U": [2**6, 2, 2**5 * 3, 2**4, 2**4, 2**4, 1, 1],
              "order": [2, 0, 1, 3, 4, 5, 6, 7], "loop": [3, 1, 0, 2], "blob": {"a": 1}, "scale": 0.5, "K": [128, 8, 1]}
    space.validate(native)
    twin = {"T:2": "3-1-2-4", "T:3": "0-1-1-2", "T:5": "1-0-1-0",
            **{f"U:2:{i}": w for i, w in enumerate([6, 1, 5, 4, 4, 4, 0, 0])}, "U:3": "0-0-1-0-0-0-0-0",
            **{f"order:{i}": d for i, d in enumerate([2, 0, 0, 0, 0, 0, 0])},
            "loop": "3-1-0-2", "blob": '{"a": 1}', "scale": 0.5, "K": "128x8x1"}
    assert from_twin(space, twin) == native


def test_lehmer_code_reaches_every_ordering_once() -> None:
    space = SearchSpace.from_json({"order": {"_type": "perm", "_value": [7]}})
    twin = twin_space(space)
    decoded = {tuple(from_twin(space, dict(zip(twin, digits)))["order"])
               for digits in itertools.product(*(spec["_value"] for spec in twin.values()))}
    assert len(decoded) == math.factorial(7)


def test_prime_splits_reach_every_factorisation_once() -> None:
    space = SearchSpace.from_json({"T": {"_type": "factor", "_value": [2**6 * 3**3 * 5 * 7, 3]}})
    twin = twin_space(space)
    assert space.size > TWIN_MAX_CHOICES and list(twin) == ["T:2", "T:3", "T:5", "T:7"]
    decoded = {tuple(from_twin(space, dict(zip(twin, combo)))["T"])
               for combo in itertools.product(*(spec["_value"] for spec in twin.values()))}
    assert len(decoded) == space.size


def test_weights_split_exponents_in_proportion() -> None:
    space = SearchSpace.from_json({"U": {"_type": "factor", "_value": [2**24, 8]}})
    weights = {f"U:2:{i}": w for i, w in enumerate([3, 1, 0, 0, 0, 0, 0, 0])}
    assert from_twin(space, weights)["U"] == [2**18, 2**6, 1, 1, 1, 1, 1, 1]
    even = from_twin(space, {f"U:2:{i}": 0 for i in range(8)})["U"]  # all-zero weights count as equal
    assert even == [2**3] * 8


def test_a_space_of_plain_choices_gets_a_marker_that_from_twin_drops() -> None:
    """Plain choices are their own twin: the marker tells a built-in tuner's proposal from a native config."""
    plain = {"rows": {"_type": "discrete", "_value": [64, 128]}, "mode": {"_type": "choice", "_value": ["a", "b"]}}
    twin = twin_space(plain)
    assert twin == {"rows": {"_type": "choice", "_value": [64, 128]}, "mode": {"_type": "choice", "_value": ["a", "b"]},
                    MARKER: {"_type": "choice", "_value": [1]}}
    validate_search_space(twin)
    assert from_twin(plain, {"rows": 64, "mode": "b", MARKER: 1}) == {"rows": 64, "mode": "b"}
    assert from_twin(plain, {"rows": 64, "mode": "b"}) == {"rows": 64, "mode": "b"}
    assert MARKER not in twin_space(MM)  # its tokens tell its proposals apart already
    named = {MARKER: {"_type": "choice", "_value": [1, 2]}}  # a knob of that name keeps its meaning
    assert twin_space(named) == named and from_twin(named, {MARKER: 1}) == {MARKER: 1}


def test_undecodable_values_are_left_for_validation() -> None:
    space = SearchSpace.from_json(LARGE)
    bad = {**sample_twin(twin_space(LARGE), random.Random(2)), "K": "3x3x3", "U:2:0": 99}
    config = from_twin(space, bad)
    assert config["K"] == "3x3x3" and config["U:2:0"] == 99 and "U" not in config
    with pytest.raises(SpaceError) as info:
        space.validate(config)
    assert "U: missing" in str(info.value) and "K: " in str(info.value)


def test_clashes_are_refused() -> None:
    clash = {"T:3": {"_type": "choice", "_value": [1, 2]}, "T": LARGE["T"]}
    with pytest.raises(SpaceError, match="clashes"):
        twin_space(clash)
    with pytest.raises(SpaceError, match="clashes"):
        from_twin(clash, {"T:3": 1, "T": [1, 1, 1, 2073600]})
    with pytest.raises(SpaceError, match="JSON text"):
        twin_space({"c": {"_type": "choice", "_value": [[1], "[1]"]}})


# ---- NNI's built-in tuners, in-process -------------------------------------------------------------

BUILT_IN: dict[str, Callable[[], Tuner]] = {
    "TPE": lambda: TpeTuner(optimize_mode="maximize", seed=0),
    "Random": lambda: RandomTuner(seed=0),
    "Evolution": lambda: EvolutionTuner(optimize_mode="maximize", population_size=8),
    "GridSearch": lambda: GridSearchTuner(),
}


@pytest.mark.parametrize("tuner_name", BUILT_IN)
@pytest.mark.parametrize("name", SPACES)
def test_builtin_tuners_propose_valid_configs(tuner_name: str, name: str) -> None:
    space, twin = SearchSpace.from_json(SPACES[name]), twin_space(SPACES[name])
    tuner = BUILT_IN[tuner_name]()
    tuner.update_search_space(twin)
    sent: list[tuple[int, dict]] = []
    configs = []
    # 30 rounds: past TPE's 20 random start-up trials and through Evolution's first generation.
    for pid in range(30):
        params = tuner.generate_multiple_parameters([pid], st_callback=lambda i, p: sent.append((i, p)))
        for params_ in params:
            config = from_twin(space, json.loads(json.dumps(params_)))
            space.validate(config)
            configs.append(config)
            tuner.receive_trial_result(pid, params_, {"default": float(pid % 7)})
            tuner.trial_end(pid, True)
    assert not sent
    assert len(configs) == 30

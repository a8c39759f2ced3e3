"""The cost model OpEvo's `screen` ranks offspring with (tuners.surrogate), on a synthetic matmul objective."""
from __future__ import annotations

import random
import statistics

import pytest
from sklearn.ensemble import RandomForestRegressor
from tuner_harness import MATMUL, gflops

from searchspace import SearchSpace
from tuners import surrogate
from tuners.surrogate import MIN_FIT, Surrogate

SPACE = SearchSpace.from_json(MATMUL)


def sampled(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [SPACE.sample(rng) for _ in range(n)]


def test_ranks_unmeasured_configurations_above_chance() -> None:
    # Fitted to 48 measurements, the model's favourite of 32 fresh candidates beats the candidates' median
    # (chance: half the time), and on average lands in the top quarter.
    quantiles = []
    for seed in range(10):
        model = Surrogate(SPACE, seed)
        model.fit([(c, gflops(c)) for c in sampled(48, seed)])
        assert model.fitted
        candidates = sampled(32, 100 + seed)
        pick = gflops(model.best(candidates))
        quantiles.append(sum(gflops(c) < pick for c in candidates) / len(candidates))
    assert statistics.mean(quantiles) > 0.75, quantiles
    assert sum(q > 0.5 for q in quantiles) >= 9, quantiles


def test_failures_rank_below_successes() -> None:
    # vec 4 is the best choice of the objective, but every vec-4 trial failed: the model learns to avoid it.
    history = [(c, None if c["vec"] == 4 else gflops(c)) for c in sampled(60, 1)]
    model = Surrogate(SPACE, 0)
    model.fit(history)
    assert model.fitted
    candidates = [{**c, "vec": v} for c in sampled(10, 2) for v in (1, 2, 4)]
    assert model.best(candidates)["vec"] != 4


def test_first_candidate_until_enough_history() -> None:
    model = Surrogate(SPACE, 0)
    few = [(c, gflops(c)) for c in sampled(MIN_FIT - 1, 3)]
    model.fit(few)
    assert not model.fitted
    model.fit([(c, None) for c in sampled(MIN_FIT, 3)])  # failures only: nothing to rank by
    assert not model.fitted
    candidates = sampled(5, 4)
    assert model.best(candidates) == candidates[0]
    with pytest.raises(ValueError, match="not fitted"):
        model.scores(candidates)
    model.fit([(c, gflops(c)) for c in sampled(MIN_FIT, 5)])
    assert model.fitted
    scores = model.scores(candidates)
    assert len(set(scores)) > 1 and model.best(candidates) == candidates[int(scores.argmax())]


def test_scores_are_the_forest_predictions_of_one_core(monkeypatch) -> None:
    """The trees' own predictions, summed in order, are scikit-learn's `predict` on one thread, bit for bit;
    and the forest built on every core is the one built on one."""
    history = [(c, gflops(c)) for c in sampled(200, 6)]
    candidates = sampled(40, 8)
    model = Surrogate(SPACE, 7)
    model.fit(history)
    assert model._model.n_jobs == -1
    scores = list(model.scores(candidates))
    one_core = model._model.set_params(n_jobs=None).predict([SPACE.encode(c) for c in candidates])
    assert scores == list(one_core)
    monkeypatch.setattr(surrogate, "RandomForestRegressor",
                        lambda **kwargs: RandomForestRegressor(**{**kwargs, "n_jobs": None}))
    single = Surrogate(SPACE, 7)
    single.fit(history)
    assert single._model.n_jobs is None and list(single.scores(candidates)) == scores

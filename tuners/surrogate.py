"""A cost model that ranks unmeasured configurations by what the measured ones scored.

OpEvo's `screen` breeds several offspring per trial and measures the one this model ranks first, as
Ansor and MetaSchedule screen their evolutionary candidates with a learned cost model before spending
a measurement. A random forest (scikit-learn's, which NNI already depends on) over the configuration's
encoding (`SearchSpace.encode`) is fitted to the quantiles of the scores, so it learns an order, not the
scale of a metric whose few best kernels differ by per cents; a failed trial counts below every success.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import rankdata
from sklearn.ensemble import RandomForestRegressor

from searchspace import Config, SearchSpace

TREES = 64
MIN_FIT = 8
"""Finished measurements needed before the model ranks anything: fewer cannot tell knobs apart."""
FAILURE_QUALITY = -0.5
"""Target of a failed trial: successes span [0, 1]."""


class Surrogate:
    """Ranks configurations of `space` by a forest fitted to (configuration, score-or-None) history."""

    def __init__(self, space: SearchSpace, seed: int | None) -> None:
        self.space = space
        self.seed = seed
        self._model: RandomForestRegressor | None = None

    def fit(self, history: list[tuple[Config, float | None]]) -> None:
        """Fit to `history` (scores oriented so that higher is better, None for a failure); no model (see
        `fitted`) while it holds fewer than MIN_FIT measurements or no success."""
        scores = np.array([s for _, s in history if s is not None])
        if len(history) < MIN_FIT or len(scores) == 0:
            self._model = None
            return
        quantile = iter((rankdata(scores) - 1) / max(len(scores) - 1, 1))
        target = [next(quantile) if s is not None else FAILURE_QUALITY for _, s in history]
        features = np.array([self.space.encode(c) for c, _ in history])
        # the trees are built on every core (each tree's randomness is drawn first: the forest is the one a
        # single core builds), since NNI waits for the tuner through each refit
        self._model = RandomForestRegressor(n_estimators=TREES, random_state=self.seed, n_jobs=-1).fit(
            features, target)

    @property
    def fitted(self) -> bool:
        """Whether the last `fit` had enough history to rank."""
        return self._model is not None

    def scores(self, candidates: list[Config]) -> np.ndarray:
        """The model's predicted quality of each candidate (higher is better); needs a fitted model."""
        if self._model is None:
            raise ValueError("the cost model is not fitted: too few measurements, or no success, to rank by")
        # the trees' own predictions, summed in order as the forest's `predict` sums them on one thread
        # (the same values), without its per-call checks and thread pool: a tuner ranks a few dozen
        # candidates a trial, where those cost ten times the trees' own work
        features = np.array([self.space.encode(c) for c in candidates], dtype=np.float32)
        total = np.zeros(len(candidates))
        for tree in self._model.estimators_:
            total += tree.tree_.predict(features).ravel()
        return total / len(self._model.estimators_)

    def best(self, candidates: list[Config]) -> Config:
        """The candidate the model ranks highest (the first while it is not fitted)."""
        if self._model is None or len(candidates) == 1:
            return candidates[0]
        return candidates[int(np.argmax(self.scores(candidates)))]

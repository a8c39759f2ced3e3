"""What the tuners' tests share: NNI 3.0 played in-process, search spaces, synthetic objectives, checks.

`FakeNNI` drives a tuner call for call as NNI's dispatcher and manager do. The objectives are smooth
stand-ins for kernel speed; `tuner_scenarios` adds a device-constrained one and warm start.
"""
from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable
from typing import Any

import nni
import pytest

from benchmarks.proposals import stand_in
from experiments.dispatcher import Dispatcher
from tuners.base import CHECKPOINT_ENV, RequestQueued, SpaceTuner
from tuners.state import parse_metric
from searchspace import Config, SearchSpace
from trial.archs import target_of
from trial.workload import parse_name

# A matmul space whose `vec` is an unordered choice, so every parameter type but perm appears.
MATMUL = {
    "K": {"_type": "factor", "_value": [1024, 3]},
    "X": {"_type": "factor", "_value": [512, 4]},
    "Y": {"_type": "factor", "_value": [1024, 4]},
    "unroll": {"_type": "discrete", "_value": [0, 16, 64, 512]},
    "vec": {"_type": "choice", "_value": [1, 2, 4]},
}
TINY = {
    "a": {"_type": "factor", "_value": [12, 2]},
    "b": {"_type": "choice", "_value": ["x", "y"]},
    "c": {"_type": "perm", "_value": [2]},
}
MM = {
    "K": {"_type": "factor", "_value": [1024, 3]},
    "X": {"_type": "factor", "_value": [512, 4]},
    "Y": {"_type": "factor", "_value": [1024, 4]},
    "unroll": {"_type": "discrete", "_value": [0, 16, 64, 512, 1500]},
    "vec": {"_type": "discrete", "_value": [1, 2, 4]},
}
"""mm/N512K1024M1024 with the original study's knobs (the template adds a split-K part to `K`, and `pipeline`)."""
BMM = {**MM, "B": {"_type": "factor", "_value": [960, 2]}}
CONV = {
    "tile_f": {"_type": "factor", "_value": [64, 4]},
    "tile_y": {"_type": "factor", "_value": [55, 4]},
    "tile_x": {"_type": "factor", "_value": [55, 4]},
    "tile_rc": {"_type": "factor", "_value": [3, 2]},
    "tile_ry": {"_type": "factor", "_value": [11, 2]},
    "tile_rx": {"_type": "factor", "_value": [11, 2]},
    "auto_unroll_max_step": {"_type": "discrete", "_value": [0, 125, 256]},
    "unroll_explicit": {"_type": "choice", "_value": [0, 1]},
}
ORDERED = {**MM, "order": {"_type": "perm", "_value": [5]}, "layout": {"_type": "choice", "_value": ["NN", "NT", "TN"]}}
SPACES = {"mm": MM, "bmm": BMM, "conv": CONV, "perm": ORDERED}


@pytest.fixture(autouse=True)
def no_checkpoint_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tuners write no state file unless a test asks for one (import this fixture to apply it)."""
    monkeypatch.delenv(CHECKPOINT_ENV, raising=False)


def ok(value: float) -> dict:
    """A trial's report of a successful measurement."""
    return {"default": value, "status": "ok", "reason": "", "params": None, "parameter_id": None}


INVALID = {"default": 0.0, "status": "invalid"}
"""A trial's report of knobs beyond the device's limits."""


_JSON_SCALARS = (str, int, float, bool, type(None))


def assert_plain_json(value: Any) -> None:
    """`value` survives a JSON round trip as it is: dicts with str keys, lists (no tuples) and exact scalars.

    NNI sends parameters to trials as JSON, so a tuple would reach the trial as a list and a numpy number
    (or any subclass of a scalar type) as a plain one; a tuner must propose what the trial will get.
    """
    assert json.loads(json.dumps(value)) == value, f"not plain JSON: {value!r}"

    def check(v: Any) -> None:
        if isinstance(v, dict):
            assert type(v) is dict and all(type(k) is str for k in v), f"not a plain JSON object: {v!r} in {value!r}"
            for item in v.values():
                check(item)
        elif isinstance(v, (list, tuple)):
            assert type(v) is list, f"not a JSON array (a {type(v).__name__}): {v!r} in {value!r}"
            for item in v:
                check(item)
        else:
            assert type(v) in _JSON_SCALARS, f"not a plain JSON scalar (a {type(v).__name__}): {v!r} in {value!r}"

    check(value)


class FakeNNI:
    """NNI 3.0 around a tuner (`experiments.dispatcher`), its trials finishing one at a time, in order or shuffled."""

    def __init__(self, tuner: SpaceTuner, objective: Callable[[Config], Any], concurrency: int = 4,
                 order_seed: int | None = None) -> None:
        self.tuner = tuner
        self.nni = Dispatcher(tuner, on_job=self.callback)
        self.objective = objective
        self.concurrency = concurrency
        self.order = random.Random(order_seed) if order_seed is not None else None
        self.running: dict[int, Config] = {}
        self.index: dict[int, int] = {}
        self.proposed: list[Config] = []
        self.outcomes: list[float | None] = []
        self.values: list[float] = []
        self.exhausted = False

    def callback(self, parameter_id: int, params: Config) -> None:
        """A trial job for `params`, answered directly or sent later through st_callback: plain JSON as NNI needs."""
        assert parameter_id not in self.running
        assert_plain_json(params)
        self.running[parameter_id] = params
        self.index[parameter_id] = len(self.proposed)
        self.proposed.append(params)
        self.outcomes.append(None)

    def request(self, n: int) -> None:
        answered = self.nni.request(n)
        self.nni.waiting.clear()  # every job starts at once: `running` holds them
        if not answered and not self.running:
            self.exhausted = True

    def finish_one(self) -> None:
        ids = list(self.running)
        pid = self.order.choice(ids) if self.order else ids[0]
        params = self.running.pop(pid)
        value = self.objective(params)
        self.nni.finish(pid, value, success=value is not None)
        metric = parse_metric(value) if value is not None else None
        self.outcomes[self.index[pid]] = metric
        if metric is not None:
            self.values.append(metric)

    def run(self, budget: int) -> FakeNNI:
        self.request(self.concurrency)
        while self.running:
            self.finish_one()
            if len(self.proposed) < budget:
                self.request(1)
        return self

    def exhaust(self) -> FakeNNI:
        """Keep requesting until the tuner has nothing more to propose."""
        self.request(self.concurrency)
        while not self.exhausted:
            if self.running:
                self.finish_one()
            self.request(1)
        return self


def make_tuner(cls: type[SpaceTuner], space: dict, **kwargs: Any) -> Any:
    tuner = cls(**kwargs)
    tuner.update_search_space(space)
    return tuner


def refused_proposals(cls: type[SpaceTuner], name: str, template: Any, arch: str, proposals: int, seed: int = 1) -> int:
    """How many of `proposals` of a `cls` tuner on `template`'s space for workload `name` the knob check refuses on
    `arch` (the proposals benchmark's GPU stand-in measures the others), 8 in flight."""
    wl = parse_name(name)
    evaluate = stand_in(wl, template, target_of(arch))
    tuner = make_tuner(cls, template.search_space(wl), workload=name, target=arch, seed=seed)
    run = FakeNNI(tuner, lambda config: evaluate(config).report(), concurrency=8).run(proposals)
    assert len(run.proposed) == proposals
    return sum(outcome is None for outcome in run.outcomes)


def keys(space: dict, configs: list[Config]) -> list[tuple]:
    model = SearchSpace.from_json(space)
    return [model.key(c) for c in configs]


def is_neighbour(space: SearchSpace, a: Config, b: Config) -> bool:
    return space.key(b) in {space.key(c) for c in space.neighbours(a)}


def distance(space: SearchSpace, a: Config, b: Config) -> float:
    """How far apart two configurations are, changing gradually with neighbour moves.

    Squared log2 ratios of tiles, squared rank steps (doubled) of discrete values, 2 per different
    choice, 1 per misplaced item of a permutation.
    """
    d = 0.0
    for name, p in space.params.items():
        x, y = a[name], b[name]
        if p.type_name == "factor":
            d += sum((math.log2(u) - math.log2(v)) ** 2 for u, v in zip(x, y))
        elif p.type_name == "discrete":
            d += 2 * (p.key(x) - p.key(y)) ** 2
        elif p.type_name == "choice":
            d += 2.0 * (x != y)
        else:
            d += sum(u != v for u, v in zip(x, y))
    return d


BEST_TILES = {"K": [32, 8, 4], "X": [8, 4, 8, 2], "Y": [4, 16, 4, 4]}


def gflops(config: dict) -> float:
    """A smooth stand-in for kernel speed: peaks at BEST_TILES, falls off with log-distance of the tiles."""
    distance = sum((math.log2(a) - math.log2(b)) ** 2 for name, best in BEST_TILES.items()
                   for a, b in zip(config[name], best))
    unroll = {0: 0.6, 16: 0.8, 64: 1.0, 512: 0.7}[config["unroll"]]
    vec = {1: 0.5, 2: 0.8, 4: 1.0}[config["vec"]]
    return 1000.0 * math.exp(-distance / 8) * unroll * vec


def objective(space_json: dict, seed: int = 123) -> Callable[[Config], float]:
    """A smooth stand-in for kernel speed (GFLOPS, peak 1000) around a random optimum of the space."""
    space = SearchSpace.from_json(space_json)
    best = space.sample(random.Random(seed))
    return lambda config: 1000.0 * math.exp(-distance(space, config, best) / 8)


def random_search_best(space_json: dict, seed: int, budget: int, f: Callable[[Config], float], pick=max) -> float:
    """The best of `budget` distinct uniformly sampled configurations."""
    space = SearchSpace.from_json(space_json)
    rng = random.Random(seed)
    seen: dict[tuple, float] = {}
    while len(seen) < budget:
        config = space.sample(rng)
        seen.setdefault(space.key(config), f(config))
    return pick(seen.values())


def runs(cls: type[SpaceTuner], space: dict, f: Callable[[Config], Any], budget: int, seeds: range,
         concurrency: int = 4, **kwargs: Any) -> list[FakeNNI]:
    """One run per seed (tuner seed and finishing order alike), checked to propose distinct valid configs."""
    out = [FakeNNI(make_tuner(cls, space, seed=s, **kwargs), f, concurrency, order_seed=s).run(budget)
           for s in seeds]
    model = SearchSpace.from_json(space)
    for run in out:
        assert len(run.proposed) == budget
        assert len(set(keys(space, run.proposed))) == budget
        for config in run.proposed:
            model.validate(config)
    return out


def assert_beats_random(cls: type[SpaceTuner], space: dict, f: Callable[[Config], float], factor: float,
                        optimize_mode: str = "maximize", seeds: range = range(5), budget: int = 150) -> None:
    """Over the seeds, `cls`'s mean best beats that of random search `factor`-fold, maximizing `f` or 1 / `f`."""
    maximize = optimize_mode == "maximize"
    metric, pick = (f, max) if maximize else ((lambda c: 1.0 / f(c)), min)
    done = runs(cls, space, lambda c: ok(metric(c)), budget, seeds, optimize_mode=optimize_mode)
    tuned = statistics.mean(pick(run.values) for run in done)
    rand = statistics.mean(random_search_best(space, s, budget, metric, pick) for s in seeds)
    assert tuned > factor * rand if maximize else tuned < rand / factor, (tuned, rand)


def failing(f: Callable[[Config], float], crash: Callable[[Config], bool]) -> Callable[[Config], Any]:
    """`f` with failures: vec 4 fails to compile yet claims a huge metric, and `crash` configs report nothing."""
    def measured(config: Config) -> Any:
        if config["vec"] == 4:
            return {"default": 1e9, "status": "compile_error", "reason": "too many registers"}
        if crash(config):
            return None
        return ok(f(config))

    return measured


def assert_exhausts_tiny(cls: type[SpaceTuner], concurrency: int, **kwargs: Any) -> None:
    """On a 24-config space (one of which fails) every config is proposed once, then `NoMoreTrialError`."""
    space = SearchSpace.from_json(TINY)

    def measured(config: Config) -> Any:
        if config["b"] == "y" and config["c"] == [1, 0]:
            return {"default": None, "status": "compile_error", "reason": "boom"}
        return ok(float(config["a"][0]))

    tuner = make_tuner(cls, TINY, seed=0, **kwargs)
    nni_ = FakeNNI(tuner, measured, concurrency=concurrency, order_seed=1).exhaust()
    assert sorted(keys(TINY, nni_.proposed)) == sorted(space.key(c) for c in space.values())
    with pytest.raises(nni.NoMoreTrialError) as info:
        tuner.generate_parameters(999, st_callback=nni_.callback)
    assert not isinstance(info.value, RequestQueued)
    assert tuner.generate_multiple_parameters([1000, 1001], st_callback=nni_.callback) == []

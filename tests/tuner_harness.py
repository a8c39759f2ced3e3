"""What the tuners' tests share: NNI 3.0 played in-process, search spaces, synthetic objectives, checks.

`FakeNNI` drives a tuner call for call as NNI's dispatcher and manager do. The objectives are smooth
stand-ins for kernel speed; `constrained` adds the device limits that make most of a matmul factor
space invalid on a GPU (as `trial.templates.matmul.resources` computes them), which is where tuners
that start from random samples or walk on from failures used to waste their budget.
"""
from __future__ import annotations

import itertools
import json
import logging
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nni
import pytest

from trial.results import MeasureResult
from trial.records import Records
from trial.templates import matmul
from trial.workload import parse, parse_name
from tuners.base import CHECKPOINT_ENV, RequestQueued, SpaceTuner, parse_metric
from searchspace import Config, SearchSpace

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
    """Plays NNI 3.0's dispatcher and manager: fresh ids, st_callback, one request per finished trial."""

    def __init__(self, tuner: SpaceTuner, objective: Callable[[Config], Any], concurrency: int = 4,
                 order_seed: int | None = None) -> None:
        self.tuner = tuner
        self.objective = objective
        self.concurrency = concurrency
        self.order = random.Random(order_seed) if order_seed is not None else None
        self.next_id = 0
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
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        answered = self.tuner.generate_multiple_parameters(ids, st_callback=self.callback)
        for pid, params in zip(ids, answered):
            self.callback(pid, params)
        if not answered and not self.running:
            self.exhausted = True

    def finish_one(self) -> None:
        ids = list(self.running)
        pid = self.order.choice(ids) if self.order else ids[0]
        params = self.running.pop(pid)
        value = self.objective(params)
        if value is not None:
            self.tuner.receive_trial_result(pid, params, value)
            metric = parse_metric(value)
            self.outcomes[self.index[pid]] = metric
            if metric is not None:
                self.values.append(metric)
        self.tuner.trial_end(pid, value is not None)

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


# ---- a constrained objective: most of the mm space is beyond the device's limits ---------------------

MAX_THREADS, MAX_SHARED_BYTES, MAX_REGISTERS = 1024, 49152, 255
PEAK = {"K": [64, 8, 2], "X": [4, 2, 16, 4], "Y": [8, 2, 16, 4], "unroll": 512, "vec": 4}
"""Where `constrained` peaks: 64x128 block tiles of 16x16 threads, 8x8 accumulators each."""


MM_WORKLOAD = parse("mm", "N512K1024M1024")
"""The workload `MM` tunes (parsing it imports no TVM)."""


def resources(config: Config) -> dict[str, Any]:
    """What one thread block of `config` of `MM` uses, from `trial.templates.matmul.resources` itself.

    `MM` has the original study's knobs, so `config` becomes the template's: no split-K part (K[0] = 1)
    and a single-buffered shared-memory stage (pipeline 0).
    """
    return matmul.resources(MM_WORKLOAD, {**config, "K": [1, *config["K"]], "pipeline": 0})


def fits(config: Config) -> bool:
    r = resources(config)
    return (r["threads"] <= MAX_THREADS and r["shared_bytes"] <= MAX_SHARED_BYTES
            and r["registers_per_thread"] <= MAX_REGISTERS)


_MM_SPACE = SearchSpace.from_json(MM)


def constrained(config: Config) -> dict:
    """The trial's report on `MM`: invalid beyond the limits, else GFLOPS (peak 20000) falling off with distance."""
    if not fits(config):
        return dict(INVALID)
    return ok(20000.0 * math.exp(-distance(_MM_SPACE, config, PEAK) / 8))


def constrained_random_best(seed: int, budget: int) -> float:
    """The best of `budget` distinct uniform samples of `MM`, an invalid one counting 0."""
    return random_search_best(MM, seed, budget, lambda c: parse_metric(constrained(c)) or 0.0)


@dataclass
class Benchmark:
    valid_after: float  # the fraction of trials after the first `skip` that were valid, over all runs
    best: float  # mean over the seeds of the best metric
    random_best: float  # the same for uniform random search

    def __str__(self) -> str:
        return (f"valid after warm-up {self.valid_after:.0%}, best {self.best:.0f} vs random {self.random_best:.0f} "
                f"({self.best / self.random_best:.1f}x)")


def assert_valid_and_better(cls: type[SpaceTuner], factor: float, seeds: range = range(6)) -> None:
    """On the constrained objective most trials after the first ones are valid and the best beats random's."""
    result = benchmark(cls, seeds)
    assert result.valid_after > 0.6, result
    assert result.best > factor * result.random_best, result


def benchmark(cls: type[SpaceTuner], seeds: range, budget: int = 128, concurrency: int = 8, skip: int = 20,
              **kwargs: Any) -> Benchmark:
    """`cls` on the constrained objective: how often its trials after the first `skip` are valid, and its best."""
    done = [FakeNNI(make_tuner(cls, MM, seed=s, **kwargs), constrained, concurrency, order_seed=s).run(budget)
            for s in seeds]
    later = [outcome is not None for run in done for outcome in run.outcomes[skip:]]
    return Benchmark(sum(later) / len(later), statistics.mean(max(run.values, default=0.0) for run in done),
                     statistics.mean(constrained_random_best(s, budget) for s in seeds))


# ---- warm start from the records store ------------------------------------------------------------------

WORKLOAD, DEVICE = "mm/N512K1024M1024", "NVIDIA H100 80GB HBM3"
"""The workload whose space is `MM`, and the device its records are said to come from."""
SECOND = {"K": [128, 4, 2], "X": [8, 1, 16, 4], "Y": [8, 2, 16, 4], "unroll": 64, "vec": 2}
"""Another valid configuration, recorded slower than `PEAK`."""


_TRIAL_IDS = itertools.count()


def record(path: Path, config: Any, gflops: float, device: str = DEVICE, status: str = "ok",
           workload: str = WORKLOAD) -> None:
    """Add a measurement of `config` to the store at `path`, as an earlier experiment's trial."""
    Records(path).append(parse_name(workload), MeasureResult(status, params=config, gflops=gflops, device=device),
                         experiment="earlier", trial=str(next(_TRIAL_IDS)))


def recorded_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A records store ($OPEVO_RECORDS) where `PEAK` then `SECOND` are the best fitting records on `DEVICE`.

    Faster records that must not be used: on another device, failed, of another workload, outside `MM`.
    """
    path = tmp_path / "records.sqlite"
    monkeypatch.setenv("OPEVO_RECORDS", str(path))
    record(path, SECOND, 9000.0)
    record(path, PEAK, 12000.0)
    record(path, PEAK, 11000.0)  # measured twice: proposed once
    record(path, SECOND, 30000.0, device="AMD Instinct MI250X")
    record(path, {**SECOND, "vec": 1}, 50000.0, status="wrong_result")
    record(path, {**SECOND, "vec": 1}, 40000.0, workload="mm/N512K1024M1024PNT")
    record(path, {**PEAK, "K": [1024, 1, 1, 1]}, 20000.0)
    return path


def warm_tuner(cls: type[SpaceTuner], **kwargs: Any) -> Any:
    """`cls` warm-started from the store $OPEVO_RECORDS names, for `WORKLOAD` on `DEVICE`, over `MM`."""
    return make_tuner(cls, MM, warm_start=True, workload=WORKLOAD, device=DEVICE, seed=0, **kwargs)


def assert_warm_start(cls: type[SpaceTuner], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      caplog: pytest.LogCaptureFixture) -> None:
    """The recorded best come first, best first; not without warm_start; a missing or broken store starts cold."""
    path = recorded_store(tmp_path, monkeypatch)
    tuner = warm_tuner(cls)
    assert tuner.warm_configs == [PEAK, SECOND]
    first = tuner.generate_multiple_parameters([0, 1, 2])
    assert first[:2] == [PEAK, SECOND] and first[2] not in (PEAK, SECOND)

    cold = make_tuner(cls, MM, workload=WORKLOAD, device=DEVICE, seed=0)
    assert cold.warm_configs == [] and PEAK not in cold.generate_multiple_parameters(list(range(8)))

    monkeypatch.setenv("OPEVO_RECORDS", str(tmp_path / "missing.sqlite"))
    with caplog.at_level(logging.INFO, logger="tuners.base"):
        assert warm_tuner(cls).warm_configs == []
    assert "no records store" in caplog.text and not (tmp_path / "missing.sqlite").exists()

    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database" * 100)
    monkeypatch.setenv("OPEVO_RECORDS", str(broken))
    with caplog.at_level(logging.WARNING, logger="tuners.base"):
        tuner = warm_tuner(cls)
    assert tuner.warm_configs == [] and "cannot read the records" in caplog.text
    assert len(tuner.generate_multiple_parameters([0, 1])) == 2

    monkeypatch.setenv("OPEVO_RECORDS", str(path))
    assert make_tuner(cls, MM, warm_start=True, workload=WORKLOAD, device="another GPU").warm_configs == []


BAD_WARM_ARGS = [
    ({"warm_start": "yes", "workload": WORKLOAD}, "warm_start"),
    ({"warm_start": True}, "workload"),
    ({"warm_start": True, "workload": "N512K1024M1024"}, "workload"),
    ({"warm_start": True, "workload": "mm/N512"}, "workload"),
    ({"workload": 7}, "workload"),
    ({"warm_start": True, "workload": WORKLOAD, "device": ""}, "device"),
    ({"warm_start": True, "workload": WORKLOAD, "warm_size": 0}, "warm_size"),
]
"""Warm-start classArgs every tuner rejects in __init__, with the name the ValueError must give."""

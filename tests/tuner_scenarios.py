"""Scenarios the three suite tuners are each put through: a device-constrained objective and warm start.

`constrained` adds the device limits that make most of a matmul factor space invalid on a GPU (as
`trial.templates.matmul.resources` computes them), which is where tuners that start from random samples
or walk on from failures used to waste their budget. Warm start reads a records store written here.
"""
from __future__ import annotations

import itertools
import logging
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tuner_harness import INVALID, MM, FakeNNI, distance, make_tuner, ok, random_search_best

from trial.results import MeasureResult
from trial.records import Records
from trial.templates import matmul
from trial.workload import parse, parse_name
from tuners.base import SpaceTuner
from tuners.state import parse_metric
from searchspace import Config, SearchSpace


# ---- a constrained objective: most of the mm space is beyond the device's limits ---------------------

MAX_THREADS, MAX_SHARED_BYTES, MAX_REGISTERS = 1024, 49152, 255
PEAK = {"K": [64, 8, 2], "X": [4, 2, 16, 4], "Y": [8, 2, 16, 4], "unroll": 512, "vec": 4}
"""Where `constrained` peaks: 64x128 block tiles of 16x16 threads, 8x8 accumulators each."""


MM_WORKLOAD = parse("mm", "N512K1024M1024")
"""The workload `MM` tunes (parsing it imports no TVM)."""


def resources(config: Config) -> dict[str, Any]:
    """What one thread block of `config` of `MM` uses, from `trial.templates.matmul.resources` itself.

    `MM` has the original study's knobs, so `config` becomes the template's: no split-K part (K[0] = 1)
    and a single-buffered, unpadded shared-memory stage (pipeline 0, pad 0).
    """
    return matmul.resources(MM_WORKLOAD, {**config, "K": [1, *config["K"]], "pipeline": 0, "pad": 0})


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
    with caplog.at_level(logging.INFO, logger="tuners.warm"):
        assert warm_tuner(cls).warm_configs == []
    assert "no records store" in caplog.text and not (tmp_path / "missing.sqlite").exists()

    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database" * 100)
    monkeypatch.setenv("OPEVO_RECORDS", str(broken))
    with caplog.at_level(logging.WARNING, logger="tuners.warm"):
        tuner = warm_tuner(cls)
    assert tuner.warm_configs == [] and "cannot read the records" in caplog.text
    assert len(tuner.generate_multiple_parameters([0, 1])) == 2

    monkeypatch.setenv("OPEVO_RECORDS", str(path))
    assert make_tuner(cls, MM, warm_start=True, workload=WORKLOAD, device="another GPU").warm_configs == []


BAD_COMMON_ARGS = [
    ({"warm_start": "yes", "workload": WORKLOAD}, "warm_start"),
    ({"warm_start": True}, "workload"),
    ({"warm_start": True, "workload": "N512K1024M1024"}, "workload"),
    ({"warm_start": True, "workload": "mm/N512"}, "workload"),
    ({"workload": 7}, "workload"),
    ({"warm_start": True, "workload": WORKLOAD, "device": ""}, "device"),
    ({"warm_start": True, "workload": WORKLOAD, "warm_size": 0}, "warm_size"),
    ({"sampling": "sobol"}, "sampling"),
]
"""Common classArgs (warm start, sampling) every tuner rejects in __init__, with the name the ValueError must give."""

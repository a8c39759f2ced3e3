"""Shared by the whole-model tests: the tiny in-repo model on the CPU, and records of its tasks made by
measuring a few configurations of each through the suite's own measure path on llvm."""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from searchspace import SearchSpace
from trial import templates
from trial.measure import Options, measure
from trial.records import Records
from trial.workload import parse_name

TINY = str(Path(__file__).resolve().parents[1] / "experiments" / "model" / "examples" / "tiny.py") + ":build"
TINY_TASKS = {  # from the model's definition (batch 2, 3x16x16 images, width 32, 10 classes)
    "conv/N2C3HW16F16K3ST1PD1": 1,  # the stem
    "conv/N2C16HW16F32K3ST2PD1": 1,  # the down-sampling conv after the depthwise one
    "mm/N128K32M32PNT": 4,  # q, k, v and o: 2 x 64 tokens, x @ W^T
    "bmm/B2N64K32M64PNT": 1,  # q @ k^T: k read in place as the transposed operand
    "bmm/B2N64K64M32PNN": 1,  # scores @ v
    "mm/N2K32M10PNT": 1,  # the head
}
CONFIGS = 3  # per task: the template's hand-picked one and two drawn from its space


@dataclass(frozen=True)
class Task:
    """A model's task as `tune` reads it (experiments.model.tasks.Task's fields that tuning uses)."""

    workload: str
    count: int
    time_ms: float
    share: float


def tiny_model():
    from experiments.model.load import load

    return load(TINY, target="llvm")


def record_tasks(workloads, path: Path) -> Records:
    """A store at `path` holding measurements of a few configurations of each workload on llvm."""
    records = Records(path)
    rng = random.Random(0)
    for name in workloads:
        wl = parse_name(name)
        space = SearchSpace.from_json(templates.candidates(wl)[-1].search_space(wl))  # the portable one
        for params in [None, *(space.sample(rng) for _ in range(CONFIGS - 1))]:
            records.append(wl, measure(wl, params, Options(target="llvm", repeat=2, min_repeat_ms=1)))
    return records


@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory, _session_locks):
    """Records of every task of the tiny model (measured once for the module's tests)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPEVO_LOCK_DIR", _session_locks)
        path = tmp_path_factory.mktemp("tiny-records") / "records.sqlite"
        yield record_tasks(TINY_TASKS, path)

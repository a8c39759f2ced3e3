"""benchmarks.replay: a model fitted to measured trials stands in for the GPU, through the benchmark driver."""
from __future__ import annotations

import csv
import gzip
import json
import math
import random
import threading
import time
from pathlib import Path

import pytest

from benchmarks import replay
from searchspace import ConstrainedSpace, SearchSpace, twin_space
from trial import templates
from trial.archs import target_of
from trial.constraints import KernelRules
from trial.workload import parse_name

WL = parse_name("mm/N128K256M128")
TARGET = target_of("sm_90")
TEMPLATE = templates.load(WL)  # the portable template's knobs: those of the landscapes measured so far
SPACE = ConstrainedSpace.of(SearchSpace.from_json(TEMPLATE.search_space(WL)), KernelRules(WL, TEMPLATE, TARGET))


def fake_gflops(config: dict) -> float:
    """A landscape the model can learn: more threads and a deeper pipeline are faster."""
    used = TEMPLATE.resources(WL, config)
    return 100.0 * math.log2(used["threads"]) + 50.0 * config["pipeline"] + 10.0 * config["vec"]


def write_trials(path: Path, configs: list[dict], device: str = "NVIDIA H200", opener=open) -> None:
    with opener(path, "wt", newline="") as f:
        out = csv.DictWriter(f, ["tuner", "status", "gflops", "device", "params"])
        out.writeheader()
        for config in configs:
            out.writerow({"tuner": "opevo", "status": "ok", "gflops": fake_gflops(config), "device": device,
                          "params": json.dumps(config)})
        out.writerow({"tuner": "opevo", "status": "invalid", "gflops": 0, "device": device,
                      "params": json.dumps(configs[0])})
        out.writerow({"tuner": "metaschedule", "status": "ok", "gflops": 1e9, "device": device,
                      "params": json.dumps({"trace": "sch.split(...)"})})


@pytest.fixture(scope="module")
def measured_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("replay") / "trials.csv.gz"
    write_trials(path, [SPACE.sample(rng) for _ in range(300)], opener=gzip.open)
    return path


def test_measurements_are_read_per_configuration(measured_file: Path, tmp_path: Path) -> None:
    measured = replay.read_measured([measured_file], SPACE)
    assert 200 < len(measured) <= 300  # duplicates merged; the failure and MetaSchedule's trace skipped
    assert all(v == fake_gflops(json.loads(k)) for k, v in measured.items())
    other = tmp_path / "other.csv"
    write_trials(other, [SPACE.sample(random.Random(1))], device="NVIDIA A100")
    with pytest.raises(ValueError, match="several devices"):
        replay.read_measured([measured_file, other], SPACE)
    with pytest.raises(ValueError, match="no ok measurement"):
        replay.read_measured([measured_file], SearchSpace.from_json({"u": {"_type": "discrete", "_value": [1]}}))


def test_the_model_stands_in_for_the_device(measured_file: Path) -> None:
    landscape = replay.Landscape(WL, TARGET, replay.read_measured([measured_file], SPACE), TEMPLATE)
    assert landscape.rank_correlation() > 0.8
    rng = random.Random(5)
    fresh = [SPACE.sample(rng) for _ in range(20)]
    results = [landscape(c) for c in fresh]
    assert all(r.status == "ok" and r.params == c and r.gflops > 0 for r, c in zip(results, fresh))
    slow, fast = min(fresh, key=fake_gflops), max(fresh, key=fake_gflops)
    assert landscape(fast).gflops > landscape(slow).gflops
    too_big = {**TEMPLATE.default_params(WL, True), "X": [1, 1, 32, 4], "Y": [1, 1, 64, 2]}
    assert landscape(too_big).status == "invalid"
    proposal = {**too_big, **{name: "x".join(map(str, too_big[name])) for name in ("X", "Y", "K")}}
    assert set(twin_space(SPACE)["X"]["_value"]) >= {proposal["X"]}
    repaired = landscape(proposal)  # a twin proposal: read as the nearest configuration that keeps the rules
    assert repaired.status == "ok" and SPACE.valid(repaired.params)


def test_each_evaluation_takes_a_drawn_latency(measured_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Results come back one at a time when evaluations take varying times: each sleeps 0.5-1.5x the latency.
    slept: list[float] = []
    here, sleep = threading.get_ident(), time.sleep  # other tests' threads that outlive them sleep as before
    monkeypatch.setattr(replay.time, "sleep", lambda s: slept.append(s) if threading.get_ident() == here else sleep(s))
    landscape = replay.Landscape(WL, TARGET, replay.read_measured([measured_file], SPACE), TEMPLATE, latency_s=0.02)
    rng = random.Random(6)
    for _ in range(20):
        assert landscape(SPACE.sample(rng)).status == "ok"
    assert len(slept) == 20 and all(0.01 <= s <= 0.03 for s in slept) and len(set(slept)) == 20


def test_the_command_replays_tuners(measured_file: Path, capsys: pytest.CaptureFixture) -> None:
    assert replay.main([WL.name, "--measured", str(measured_file), "--tuners", "opevo:2", "random",
                        "--trials", "12", "--workers", "4", "--latency-ms", "2"]) == 0
    out = capsys.readouterr().out
    assert "cross-validated rank correlation" in out and "the GFLOPS below are the model's" in out
    rows = [line for line in out.splitlines() if line.startswith(("| opevo |", "| random |"))]
    assert [row.split(" | ")[1] for row in rows] == ["2", "1"]
    with pytest.raises(SystemExit):
        replay.main([WL.name, "--measured", str(measured_file), "--tuners", "metaschedule"])


def test_the_kept_landscape_reads_with_the_templates_knobs_of_today() -> None:
    # The measurements under benchmarks/data are the command's documented example: a template whose knobs
    # change leaves them unreadable (no configuration of today's space), which this catches.
    wl = parse_name("mm/N512K1024M1024PNT_tf32")
    kept = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "mm-N512K1024M1024PNT_tf32-H200.csv.gz"
    template, measured = replay.measured_template(wl, target_of("sm_90"), [kept])
    assert template.applies(wl, target_of("sm_90")) and len(measured) >= 200
    assert max(measured.values()) > 100_000

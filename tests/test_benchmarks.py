"""Benchmarks: the driver plays NNI's dispatcher faithfully; a tiny CPU comparison writes its CSV, plot, table."""
import csv
import itertools
import json
import re
import threading
from collections import deque

import pytest
import yaml
from nni.tuner import Tuner
from nni_experiment import free_port

from benchmarks import compare, driver, experiments, gpucheck, proposals
from experiments import plots
from experiments import registry, write
from trial import templates
from trial.results import STAGES, STATUSES, MeasureResult
from trial.records import Records
from trial.workload import parse
from tuners.opevo import OpEvoTuner
from searchspace import SearchSpace, from_twin, twin_space

TINY = {"a": {"_type": "choice", "_value": [1, 2, 3]}}
SPACE = {"a": {"_type": "choice", "_value": list(range(1, 41))},
         "b": {"_type": "discrete", "_value": [1, 2, 4, 8]}}


def fake_measure(params):
    return MeasureResult("ok", params=params, gflops=float(sum(v for v in params.values() if isinstance(v, int))),
                         latency_ms=1.0, target="llvm", device="fake")


class Recorder(Tuner):
    """Answers only the first id of each request at once; the others after a result, through st_callback."""

    def __init__(self):
        self.calls, self.proposed, self.backlog, self.send, self.count = [], {}, deque(), None, 0

    def update_search_space(self, search_space):
        self.calls.append(("update_search_space",))

    def propose(self, parameter_id):
        self.count += 1
        self.proposed[parameter_id] = {"a": self.count}
        return self.proposed[parameter_id]

    def generate_multiple_parameters(self, parameter_id_list, **kwargs):
        self.send = kwargs["st_callback"]
        self.calls.append(("generate", list(parameter_id_list)))
        first, *rest = parameter_id_list
        self.backlog.extend(rest)
        return [self.propose(first)]

    def receive_trial_result(self, parameter_id, parameters, value, **kwargs):
        self.calls.append(("result", parameter_id, parameters, value))
        if self.backlog:
            waiting = self.backlog.popleft()
            self.send(waiting, self.propose(waiting))

    def trial_end(self, parameter_id, success, **kwargs):
        self.calls.append(("end", parameter_id, success))


def test_dispatcher_calls_the_tuner_as_nni_does():
    tuner = Recorder()
    run = driver.drive(tuner, TINY, trials=6, workers=3, evaluate=fake_measure)
    assert run.ended == "budget" and len(run.trials) == 6
    assert tuner.calls[0] == ("update_search_space",)
    generated = [c[1] for c in tuner.calls if c[0] == "generate"]
    assert generated[0] == [0, 1, 2]  # the first request is for `workers` parameters
    ids = [i for batch in generated for i in batch]
    assert ids == list(range(len(ids)))  # fresh ids, in order, for every request
    for call in (c for c in tuner.calls if c[0] == "result"):
        _, pid, parameters, value = call
        assert parameters is tuner.proposed[pid]  # the parameters as the tuner proposed them
        assert value["parameter_id"] == pid and value["default"] == parameters["a"] and value["status"] == "ok"
        after = tuner.calls[tuner.calls.index(call) + 1]
        assert after == ("end", pid, True)  # trial_end follows each result
    measured = {t.parameter_id for t in run.trials}
    assert measured == {c[1] for c in tuner.calls if c[0] == "result"}
    assert measured - {batch[0] for batch in generated}, "some parameters came through st_callback"


def test_queued_requests_of_a_suite_tuner_are_answered_through_st_callback():
    """OpEvo with one offspring in flight: requests beyond it wait and come back through st_callback."""
    lock, state = threading.Lock(), {"now": 0, "most": 0}

    def evaluate(params):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            return fake_measure({"a": params["a"], "b": params["b"]})
        finally:
            with lock:
                state["now"] -= 1

    run = driver.drive(OpEvoTuner(parents_size=1, offspring_size=1, seed=3), SPACE, 10, 4, evaluate)
    assert run.ended == "budget" and len(run.trials) == 10
    assert state["most"] == 1  # the other three slots waited on queued requests
    configs = [tuple(sorted(t.result.params.items())) for t in run.trials]
    assert len(set(configs)) == 10


@pytest.mark.parametrize("name", ["opevo", "gbfs", "na2c", "random", "tpe"])
def test_no_more_trials_ends_the_run_on_a_tiny_space(name):
    tuner, twin = driver.make_tuner(name, seed=1)
    space = twin_space(TINY) if twin else TINY
    run = driver.drive(tuner, space, trials=10, workers=2,
                       evaluate=lambda params: fake_measure(from_twin(TINY, params)))
    assert run.ended == "no more trials"
    assert sorted(t.result.params["a"] for t in run.trials) == [1, 2, 3]


@pytest.mark.parametrize("name", driver.TUNERS)
def test_make_tuner_builds_the_experiments_tuner_seeded(name):
    """The experiment configs' class (the seeded Evolution in place of NNI's), the twin space for built-ins."""
    tuner, twin = driver.make_tuner(name, seed=1)
    assert twin == (name in registry.BUILTIN_TUNERS)
    spec = registry.BUILTIN_TUNERS[name] if twin else registry.TUNERS[name]
    assert f"{type(tuner).__module__}.{type(tuner).__qualname__}" == (spec.get("className")
                                                                       or driver._BUILTIN_CLASSES[spec["name"]])

    def proposals():
        tuner, twin = driver.make_tuner(name, seed=1)
        run = driver.drive(tuner, twin_space(TINY) if twin else TINY, trials=6, workers=1,
                           evaluate=lambda params: fake_measure(from_twin(TINY, params)))
        assert run.workers == 1
        return [t.result.params["a"] for t in run.trials]

    first = proposals()
    assert first and set(first) <= {1, 2, 3}
    assert proposals() == first  # the same seed proposes the same


def test_run_records_every_measurement_and_builtins_get_the_twin_space():
    wl = parse("mm", "N32K32M32")
    native = SearchSpace.from_json(templates.load(wl).search_space(wl))
    received = []

    def evaluate(params):
        received.append(params)
        config = from_twin(native, params)
        native.validate(config)
        return MeasureResult("ok", params=config, gflops=1.0 + len(received), target="llvm", device="fake")

    run = driver.run(wl, "tpe", trials=5, seed=0, workers=2, records=Records(), progress=False, evaluate=evaluate)
    assert len(run.trials) == 5 and run.tuner == "tpe" and run.experiment.startswith("bench-")
    assert all(params != from_twin(native, params) for params in received)  # twin-encoded, decoded by the trial
    kept = [r for r in Records().query(workload=wl.key) if r.experiment == run.experiment]
    assert len(kept) == 5 and {r.tuner for r in kept} == {"tpe"}
    assert {r.trial for r in kept} == {str(t.parameter_id) for t in run.trials}


def test_plan_and_trials_to():
    assert compare.plan(["opevo:3", "tpe"], 2) == [("opevo", 0), ("opevo", 1), ("opevo", 2), ("tpe", 0), ("tpe", 1)]
    with pytest.raises(ValueError, match="unknown tuner"):
        compare.plan(["nope"], 1)
    variant = "opevo[mutate_rate=0.3,selection=fitness]"
    assert compare.plan([f"{variant}:2", "metaschedule"], 1) == [(variant, 0), (variant, 1), ("metaschedule", 0)]
    for bad, why in (("opevo:0", "bad seed count"), (f"{variant}:x", "bad seed count"),
                     ("opevo[mutate_rate]", "expected name=value"), ("opevo[bogus=1]", "bogus"),
                     ("opevo[mutate_rate=2]", "mutate_rate must be")):
        with pytest.raises(ValueError, match=re.escape(why)):
            compare.plan([bad], 1)
    tuner, _ = driver.make_tuner(variant, seed=3)
    assert (tuner.mutate_rate, tuner.selection, tuner.offspring_size) == (0.3, "fitness", 8)  # the rest: the registry's
    assert plots.trials_to(0.95, [1.0, 5.0, 9.6, 10.0]) == 3
    assert plots.trials_to(0.95, [0.0, 0.0]) is None


def test_compare_on_the_cpu(tmp_path, capsys):
    """The whole comparison at a tiny budget, two runs at a time: every trial in the CSV, a PNG, the tables."""
    tuners, seeds, trials = ["opevo", "gbfs", "random", "tpe", "metaschedule"], 2, 6
    out = tmp_path / "out"
    assert compare.main(["mm/N32K32M32", "--tuners", *tuners, "--trials", str(trials), "--seeds", str(seeds),
                         "--target", "llvm", "--workers", "2", "--parallel", "2", "--min-repeat-ms", "1",
                         "--out", str(out), "--records", str(tmp_path / "records.sqlite"), "--breakdown",
                         "--no-progress"]) == 0
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert list(rows[0]) == compare.COLUMNS
    for tuner in tuners:
        for seed in range(seeds):
            mine = [r for r in rows if r["tuner"] == tuner and r["seed"] == str(seed)]
            measured = [r for r in mine if r["kind"] == "trial"]
            assert [int(r["index"]) for r in measured] == list(range(1, trials + 1)), (tuner, seed)
            assert all(r["status"] in STATUSES for r in mine)
            assert any(r["status"] == "ok" and float(r["gflops"]) > 0 for r in measured)
            finals = [r for r in mine if r["kind"] == "final"]
            assert len(finals) == (tuner == "metaschedule")
    assert all(r["status"] == "ok" for r in rows if r["kind"] == "final")
    assert len(rows) == len(tuners) * seeds * trials + seeds

    from matplotlib.image import imread

    image = imread(out / "convergence.png")
    assert image.ndim == 3 and image.shape[2] in (3, 4) and min(image.shape[:2]) >= 200
    assert len({tuple(px) for px in image.reshape(-1, image.shape[2])[::97]}) > 5  # lines and labels, not blank

    printed = capsys.readouterr().out
    assert "| tuner | runs | trials | best GFLOPS (median) |" in printed and "## Where the time goes" in printed
    for tuner in tuners:
        assert f"| {tuner} | {seeds} | {trials} |" in printed
    section = printed.split("## Where the time goes", 1)[1].strip().splitlines()
    head = [c.strip() for c in section[0].strip().strip("|").split("|")]
    assert head[:2] == ["tuner", "trials/s"] and head[5:5 + len(STAGES)] == list(STAGES)
    body = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in itertools.takewhile(str.strip, section[2:])]
    assert [row[0] for row in body] == tuners  # one row per tuner
    for row in body:
        cells = dict(zip(head, row, strict=True))
        assert float(cells["trials/s"]) > 0 and float(cells["trial"]) > 0, row
        assert all(float(cells[stage]) >= 0 for stage in STAGES), row
        assert float(cells["workers busy"].removesuffix("%")) > 0, row
    assert (out / "summary.md").read_text().strip() == printed.strip()
    kept = Records(tmp_path / "records.sqlite").query(workload="mm/N32K32M32PNN")
    assert len(kept) == (len(tuners) - 1) * seeds * trials  # MetaSchedule's schedules are no knob configs
    assert all(r.experiment.startswith("bench-") for r in kept)


def test_benchmark_experiments_start_cold(tmp_path):
    wl = parse("mm", "N32K32M32")
    folder = experiments.write_folder(wl, tmp_path, trials=8, concurrency=2)
    for tuner in registry.TUNERS:
        config = yaml.safe_load((folder / f"config_{tuner}.yml").read_text())
        assert config["tuner"]["classArgs"]["warm_start"] is False and config["maxTrialNumber"] == 8
    default = write.config(wl, "opevo", tmp_path)
    assert default["tuner"]["classArgs"]["warm_start"] is True  # the checked-in experiments warm-start


def test_nnictl_experiment_is_stopped_when_following_it_fails(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(experiments.tune, "create", lambda config, port: calls.append(("create", config.name)) or "X")

    def broken(*args, **kwargs):
        raise RuntimeError("web UI gone")

    monkeypatch.setattr(experiments.tune, "wait", broken)
    monkeypatch.setattr(experiments.tune, "nnictl", lambda *args, check=True: calls.append(args))
    with pytest.raises(RuntimeError, match="web UI gone"):
        experiments.nnictl_experiment(tmp_path, "opevo", 8080)
    assert calls == [("create", "config_opevo.yml"), ("stop", "X")]


def test_gpucheck_runs_end_to_end_on_the_cpu_when_asked(tmp_path, capsys):
    """The GPU check's two parts, at a tiny size on the CPU (--target llvm): hand-picked table, then an
    OpEvo experiment through nnictl; it passes only if both measured."""
    out = tmp_path / "check.json"
    code = gpucheck.main(["--target", "llvm", "--workloads", "mm/N16K16M16", "conv/N1C2HW8F4K3ST1PD1",
                          "--experiment", "mm/N16K16M16", "--trials", "4", "--concurrency", "2",
                          "--port", str(free_port()), "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "| mm/N16K16M16 | ok |" in text and "| conv/N1C2HW8F4K3ST1PD1 | ok |" in text
    assert "GPU check passed" in text
    data = json.loads(out.read_text())
    assert data["experiment"]["measured"] == 4 and data["experiment"]["best_gflops"] > 0


def test_gpucheck_says_so_where_there_is_no_gpu(capsys):
    assert gpucheck.main([]) == 2
    assert "no GPU here" in capsys.readouterr().err


def test_proposals_benchmark_prints_rate_and_valid_share(capsys):
    proposals.main(["mm/N1000K197M49", "--arch", "sm_80", "--tuners", "opevo", "gbfs", "--trials", "40"])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0].lstrip("| "), r[1], r[2]) for r in rows] == [("mm/N1000K197M49", "opevo", "40"),
                                                             ("mm/N1000K197M49", "gbfs", "40")]
    assert all(float(r[3].replace(",", "")) > 0 and r[4] == "100.0 % |" for r in rows)


def test_a_run_that_raises_leaves_the_others_tables(tmp_path, capsys, monkeypatch):
    """One run's exception (here: the driver of seed 1 fails) is named in the summary and the exit status;
    the other runs' rows, plot and tables are still written."""
    run = driver.run

    def flaky(wl, tuner, trials, seed, *args, **kwargs):
        if seed == 1:
            raise FileNotFoundError("tuners/gone.py")
        return run(wl, tuner, trials, seed, *args, **kwargs)

    monkeypatch.setattr(driver, "run", flaky)
    out = tmp_path / "out"
    assert compare.main(["mm/N32K32M32", "--tuners", "random:2", "--trials", "4", "--target", "llvm",
                         "--workers", "2", "--parallel", "2", "--min-repeat-ms", "1", "--out", str(out),
                         "--no-record", "--no-progress"]) == 1
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert {r["seed"] for r in rows} == {"0"} and len(rows) == 4
    summary = (out / "summary.md").read_text()
    failure = "random seed 1: FileNotFoundError: tuners/gone.py"
    assert "| random | 1 | 4 |" in summary and f"- {failure}" in summary
    assert json.loads((out / "runs.json").read_text())["failed_runs"] == [failure]
    assert (out / "convergence.png").exists()

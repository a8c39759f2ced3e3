"""Tuning a model's tasks: the scheduler's allocation, resume after a kill, the records as a knowledge base,
bad input, and one end-to-end run through nnictl on the CPU."""
import json

import pytest
from model_fixtures import Task
from nni_experiment import free_port

from experiments import tune as nnictl_runner
from experiments.model import tune as model_tune
from experiments.model.manifest import Manifest, ManifestError
from experiments.model.rounds import RoundResult
from experiments.model.scheduler import Progress, gradient, pick
from trial.records import Records
from trial.results import MeasureResult
from trial.templates.matmul import UNROLL_STEPS, VECTOR_WIDTHS
from trial.workload import parse_name

DEVICE = "Test CPU"


class FakeNni:
    """Stands in for the NNI rounds: each experiment holds a trial count (kept across a simulated kill,
    as NNI's experiments are) and its best latency follows the task's curve: curve(trials) ms per call."""

    def __init__(self, curves, experiments=None, kill_after=None, kill_mid_round=False):
        self.curves, self.kill_after, self.kill_mid_round = curves, kill_after, kill_mid_round
        self.experiments = {} if experiments is None else experiments  # id -> [workload, trials]
        self.calls = []  # (workload, trials run in the call)

    def __call__(self, wl, experiment, upto, timeout_s, started):
        if experiment is None:
            experiment = f"exp{len(self.experiments)}"
            self.experiments[experiment] = [wl.name, 0]
            started(experiment)
        held = self.experiments[experiment][1]
        if self.kill_after is not None and len(self.calls) == self.kill_after:
            if self.kill_mid_round:  # half the round ran, then the process died
                self.experiments[experiment][1] = held + (upto - held) // 2
            raise KeyboardInterrupt
        self.experiments[experiment][1] = max(upto, held)
        self.calls.append((wl.name, max(upto - held, 0)))
        latency = self.curves[wl.name](upto)
        return RoundResult(experiment, max(upto, held), 1.0 / latency, latency)

    def measured(self):
        return sum(trials for _, trials in self.experiments.values())


def flat(ms):
    return lambda n: ms


def improving(start, floor):
    return lambda n: floor + (start - floor) / n


TASKS = [Task("mm/N64K64M64", 2, 1.0, 0.75), Task("conv/N1C4HW8F8K3ST1PD1", 1, 0.3, 0.25)]
CURVES = {"mm/N64K64M64": improving(0.8, 0.2), "conv/N1C4HW8F8K3ST1PD1": flat(0.9)}


def run_fake(tmp_path, trials, runner, tasks=TASKS, minutes=None, **more):
    m = Manifest.load(tmp_path) or model_tune.plan(tasks, trials, minutes, "llvm", DEVICE, retune=False)
    m.save(tmp_path)
    return model_tune.run(m, tmp_path, runner, trials, minutes, **more)


# -- the scheduler ---------------------------------------------------------------------------------------

def test_gradient_is_ansors_formula():
    """weight * (alpha * backward + (1 - alpha) * forward), backward over a window of 3 rounds."""
    p = Progress(weight=2, cost_ms=1.0, rounds=4, history=[4.0, 3.0, 2.0, 1.0])
    backward, forward = (1.0 - 4.0) / 3, -1.0 / 4
    assert gradient(p) == pytest.approx(2 * (0.2 * backward + 0.8 * forward))
    young = Progress(weight=2, cost_ms=1.0, rounds=2, history=[2.0, 1.0])  # too few rounds for a window
    assert gradient(young) == pytest.approx(2 * 0.8 * -1.0 / 2)
    assert gradient(Progress(weight=5, cost_ms=1.0, rounds=1, history=[1.0], dead=True)) == 0


def test_pick_warms_up_every_task_then_follows_weight_and_improvement():
    tasks = [Progress(1, 1.0, rounds=1, history=[1.0]), Progress(1, 1.0), Progress(1, 1.0)]
    assert pick(tasks) == 1  # the first task without a round
    heavy = [Progress(1, 1.0, 1, [1.0]), Progress(3, 1.0, 1, [1.0])]
    assert pick(heavy) == 1  # same curve, three times the calls per forward
    flat_ = Progress(1, 1.0, 4, [1.0] * 4)
    better = Progress(1, 1.0, 4, [2.0, 1.6, 1.3, 1.0])
    assert pick([flat_, better]) == 1  # same weight and cost, but it improved lately
    assert pick([Progress(1, 1.0, 1, [1.0], dead=True), Progress(1, 0.1, 9, [0.1] * 9)]) == 1
    assert pick([Progress(1, 1.0, 1, [1.0], dead=True)]) is None


def test_allocation_warm_up_first_budget_kept_and_deterministic(tmp_path):
    """Warm-up round of each task, then rounds by weight x improvement; the budget to the trial."""
    tasks = TASKS  # mm: twice the calls, more of the model's time, and improving; conv: flat
    schedules = []
    for attempt in range(2):
        out = tmp_path / str(attempt)
        m = model_tune.plan(tasks, 30, None, "llvm", DEVICE, retune=False)
        m.save(out)
        fake = FakeNni(CURVES)
        m = model_tune.run(m, out, fake, 30, None)
        schedules.append(fake.calls)
        assert m.spent == fake.measured() == 30
    first, second = schedules
    assert first == second
    assert first[:2] == [("mm/N64K64M64", 7), ("conv/N1C4HW8F8K3ST1PD1", 7)]  # warm-up: 30 // 4, in order
    assert first[-1][1] == 30 - 7 * (len(first) - 1)  # the last round is what the budget leaves
    mm_rounds = sum(name == "mm/N64K64M64" for name, _ in first[2:])
    assert mm_rounds > len(first[2:]) - mm_rounds  # twice the calls and improving: most rounds


def test_a_task_that_measures_nothing_more_is_dropped(tmp_path):
    class Exhausted(FakeNni):
        def __call__(self, wl, experiment, upto, timeout_s, started):
            if wl.name == "conv/N1C4HW8F8K3ST1PD1" and experiment is not None:
                upto = self.experiments[experiment][1]  # its tuner has nothing more to propose
            return super().__call__(wl, experiment, upto, timeout_s, started)

    fake = Exhausted({"mm/N64K64M64": flat(1.0), "conv/N1C4HW8F8K3ST1PD1": flat(2.0)})
    tasks = [TASKS[0], Task("conv/N1C4HW8F8K3ST1PD1", 1, 3.0, 0.6)]  # conv weighs the most: picked, dies
    m = run_fake(tmp_path, 24, fake, tasks=tasks)
    conv = m.entries[1]
    assert conv.progress.dead and conv.trials == 6 and conv.progress.rounds == 2
    assert m.entries[0].trials == 18
    assert m.spent == fake.measured() == 24


@pytest.mark.parametrize("mid_round", [False, True])
def test_a_killed_run_resumes_without_spending_a_trial_twice(tmp_path, mid_round):
    whole = FakeNni(CURVES)
    run_fake(tmp_path / "whole", 40, whole)
    experiments = {}
    killed = FakeNni(CURVES, experiments, kill_after=3, kill_mid_round=mid_round)
    with pytest.raises(KeyboardInterrupt):
        run_fake(tmp_path / "run", 40, killed)
    saved = Manifest.load(tmp_path / "run")
    assert saved.spent == sum(t for _, t in killed.calls)  # what the finished steps spent
    assert saved.in_flight is not None and saved.entries[saved.in_flight["task"]].experiment in experiments
    again = FakeNni(CURVES, experiments)  # NNI's experiments outlive the killed process
    m = run_fake(tmp_path / "run", 40, again)
    assert m.spent == again.measured() == 40  # every trial run once, over both runs
    assert m.in_flight is None
    assert [name for name, _ in killed.calls + again.calls] == [name for name, _ in whole.calls]
    assert [e.experiment for e in m.entries] == ["exp0", "exp1"]  # each task kept its one experiment


def test_a_time_budget_stops_when_time_is_up(tmp_path):
    ticks = iter(range(0, 10_000, 50))  # every look at the clock: 50 s later
    fake = FakeNni(CURVES)
    m = run_fake(tmp_path, None, fake, minutes=5, clock=lambda: next(ticks))
    assert m.round_trials == model_tune.ROUND_TRIALS and m.warmup_trials == model_tune.WARMUP_TRIALS
    assert fake.calls[0] == ("mm/N64K64M64", m.warmup_trials)  # a short first round: the rate is unknown
    assert 0 < m.spent and 300 <= m.elapsed_s < 400
    assert len(fake.calls) == 2  # each round looks three times: 150 s a round
    resumed = model_tune.run(Manifest.load(tmp_path), tmp_path, FakeNni(CURVES), None, 5, clock=lambda: 0)
    assert resumed.spent == m.spent  # the minutes were spent before the restart


def test_rounds_hold_four_waves_of_the_concurrency_unless_the_budget_is_small():
    assert model_tune.round_trials(None, 3, concurrency=4) == model_tune.ROUND_TRIALS == 32  # a CPU: 8 waves
    assert model_tune.round_trials(None, 3, concurrency=64) == model_tune.round_trials(10**5, 3, 64) == 4 * 64
    assert model_tune.round_trials(12, 2, concurrency=64) == 3  # a small budget: half of it the warm-up
    m = model_tune.plan(TASKS, None, 5, "llvm", DEVICE, retune=False, concurrency=64)
    assert (m.round_trials, m.warmup_trials) == (256, 128)  # the warm-up under a time budget: two waves


# -- the knowledge base and bad input --------------------------------------------------------------------

def record(workload: str, device: str) -> None:
    knobs = {"K": [1, 2, 4, 4], "X": [2, 1, 4, 4], "Y": [1, 2, 2, 8], "unroll": UNROLL_STEPS[0],
             "vec": VECTOR_WIDTHS[0], "pipeline": 1, "kmajor": 0, "pad": 0}
    Records().append(parse_name(workload), MeasureResult("ok", "", knobs, 5.0, 0.01, 0.0, 0.1, "llvm", device),
                     "exp-before", "t0", "opevo")


def test_a_task_in_the_records_of_this_device_is_not_tuned_unless_retune():
    record("mm/N32K32M32", DEVICE)
    tasks = [Task("mm/N32K32M32", 1, 1.0, 0.5), Task("mm/N64K64M64", 1, 1.0, 0.5)]
    m = model_tune.plan(tasks, 8, None, "llvm", DEVICE, retune=False)
    known, fresh = m.entries
    assert known.from_records and not known.tuned and known.gflops == 5.0 and known.experiment == "exp-before"
    assert fresh.tuned and not fresh.from_records
    assert m.round_trials == 4  # rounds are sized for the one task left
    again = model_tune.plan(tasks, 8, None, "llvm", DEVICE, retune=True)
    assert all(e.tuned for e in again.entries) and again.round_trials == 2


def test_records_of_another_device_are_named_and_the_task_tuned_afresh():
    record("mm/N32K32M32", "Some GPU")
    m = model_tune.plan([Task("mm/N32K32M32", 1, 1.0, 1.0)], 8, None, "llvm", DEVICE, retune=False)
    (entry,) = m.entries
    assert entry.tuned and not entry.from_records
    assert "Some GPU" in entry.note and f"no record of this device ({DEVICE})" in entry.note


def test_an_unparsable_workload_is_skipped_with_its_reason_and_the_rest_go_on(tmp_path):
    tasks = [Task("mm/N64K64", 1, 1.0, 0.2), Task("softmax/N8", 1, 1.0, 0.2), *TASKS,
             Task("mm/N32K32M32", 0, 0.0, 0.0)]
    fake = FakeNni(CURVES)
    m = run_fake(tmp_path, 8, fake, tasks=tasks)
    assert [e.tuned for e in m.entries] == [False, False, True, True, False]
    assert "cannot tune" in m.entries[0].skipped and "softmax" in m.entries[1].skipped
    assert "no time in the model" in m.entries[4].skipped
    assert fake.measured() == 8
    s = model_tune.summary(m)
    assert s["tasks"][1]["skipped"] and s["trials"] == 8
    assert "skipped" in model_tune.table(s)


def test_bad_budgets_and_no_tasks_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="no tasks"):
        model_tune.tune([], tmp_path, 10, None, target="llvm")
    with pytest.raises(ValueError, match="give a budget"):
        model_tune.tune(TASKS, tmp_path, None, None, target="llvm")
    with pytest.raises(ValueError, match=r"smaller than the warm-up round: 2 tasks to tune x 2 trials = 4"):
        model_tune.tune(TASKS, tmp_path, 3, None, target="llvm")
    assert not (tmp_path / "manifest.json").exists()  # nothing planned, nothing to resume


def test_a_manifest_of_other_tasks_is_not_resumed(tmp_path):
    run_fake(tmp_path, 8, FakeNni(CURVES))
    m = Manifest.load(tmp_path)
    with pytest.raises(ManifestError, match="other tasks"):
        m.check_same(["mm/N128K128M128"], DEVICE, tmp_path)
    with pytest.raises(ManifestError, match="not on this device"):
        m.check_same([t.workload for t in TASKS], "Other CPU", tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ManifestError, match="cannot be read"):
        Manifest.load(tmp_path)


def test_a_resume_takes_the_tasks_in_another_order(tmp_path, monkeypatch):
    """Profiled again, two tasks of close times may swap places: still the same tuning, resumed by tune."""
    experiments = {}

    class Rounds(FakeNni):  # tune's NniRounds(out, pool, concurrency), the fake's experiments kept
        def __init__(self, out, pool, concurrency, kill_after=None):
            super().__init__(CURVES, experiments, kill_after=kill_after)

        def prepare(self, wl, trials):
            pass

    monkeypatch.setattr(model_tune, "this_device", lambda target: DEVICE)
    monkeypatch.setattr(model_tune, "NniRounds", lambda *args: Rounds(*args, kill_after=1))
    with pytest.raises(KeyboardInterrupt):
        model_tune.tune(TASKS, tmp_path, 8, None, target="llvm")
    assert Manifest.load(tmp_path).in_flight is not None
    monkeypatch.setattr(model_tune, "NniRounds", Rounds)
    done = model_tune.tune(list(reversed(TASKS)), tmp_path, 8, None, target="llvm")
    assert done["trials"] == 8 == sum(t for _, t in experiments.values())
    assert [r["workload"] for r in done["tasks"]] == [t.workload for t in TASKS]  # the manifest's order


# -- end to end through nnictl ---------------------------------------------------------------------------

def test_tune_two_tasks_through_nnictl_then_a_second_tune_measures_nothing(tmp_path):
    """Warm-up rounds of 3 trials create the experiments, later rounds resume them; every experiment is
    stopped; a second tune of the same tasks in a new folder takes both from the records."""
    tasks = [Task("mm/N64K64M64", 3, 0.05, 0.6), Task("conv/N1C4HW8F8K3ST1PD1", 1, 0.05, 0.4)]
    port = free_port()
    first = model_tune.tune(tasks, tmp_path / "a", 12, None, target="llvm", port=port)
    assert first["trials"] == 12
    rows = first["tasks"]
    assert sum(r["trials"] for r in rows) == 12 and all(r["trials"] >= 3 for r in rows)
    assert all(r["experiment"] and not r["from_records"] and r["gflops"] for r in rows)
    for r in rows:
        assert (tmp_path / "a" / "experiments" / r["workload"] / "config_opevo.yml").exists()
        kept = [x for x in Records().query(r["key"]) if x.experiment == r["experiment"]]
        assert len(kept) == r["trials"]
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["spent"] == 12 and manifest["in_flight"] is None
    running = nnictl_runner.nnictl("experiment", "list", check=False).stdout
    assert not any(r["experiment"] in running for r in rows)

    second = model_tune.tune(tasks, tmp_path / "b", 12, None, target="llvm", port=port)
    assert second["trials"] == 0
    assert all(r["from_records"] and r["trials"] == 0 for r in second["tasks"])
    assert [r["gflops"] for r in second["tasks"]] == [r["gflops"] for r in rows]
    assert not (tmp_path / "b" / "nni").exists()
    again = model_tune.tune(tasks, tmp_path / "a", 12, None, target="llvm", port=port)  # resumed: all spent
    assert again["trials"] == 12 and [r["experiment"] for r in again["tasks"]] == [r["experiment"] for r in rows]


def test_each_round_is_said_with_the_run_so_far(tmp_path):
    """A line a round: its task, trials and best kernel, the budget spent and the model's estimated time,
    which only falls as kernels beat the vendor's."""
    said, fake = [], FakeNni(CURVES)
    m = run_fake(tmp_path, 30, fake, say=said.append)
    assert len(said) == len(fake.calls)
    spent, estimates = 0, []
    for i, (line, (name, trials)) in enumerate(zip(said, fake.calls), start=1):
        spent += trials
        assert line.startswith(f"round {i}, {name}: {trials} trials, best ")
        assert f"; {spent} of 30 trials in " in line
        before, after = map(float, line.rsplit("model ", 1)[1].split(" ms")[0].split(" -> "))
        assert before == pytest.approx(sum(t.time_ms for t in TASKS), abs=1e-3)
        estimates.append(after)
    assert estimates == sorted(estimates, reverse=True) and estimates[-1] < estimates[0]
    assert model_tune.summary(m)["model_ms_estimate"] == pytest.approx(estimates[-1], abs=1e-3)

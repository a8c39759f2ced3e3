"""Where an nnictl trial's time goes: the timelines, their join with NNI's trial jobs, and the concurrency
the experiments get for a machine's GPUs."""
import json
import os

import pytest
import yaml
from nni_experiment import free_port

from benchmarks import nnipace
from experiments import registry, write
from trial import timeline
from trial.workload import parse


def _trial(pid, start, asking, received, measured, reported, parameter_id, job):
    return [{"event": "trial_started", "t": start, "pid": pid},
            {"event": "trial_asking", "t": asking, "pid": pid},
            {"event": "trial_received", "t": received, "pid": pid, "parameter_id": parameter_id, "trial": job},
            {"event": "trial_measured", "t": measured, "pid": pid, "parameter_id": parameter_id,
             "stages": {"build": 1.0, "run": 0.25}, "cpu_s": {"build": 0.9, "run": 0.1 * pid - 0.8},
             "device": 0, "device_s": {"held": measured - 0.3, "released": measured - 0.05},
             "run_s": {"load": 0.01, "timing": 0.1 * pid - 0.8}},
            {"event": "trial_reported", "t": reported, "pid": pid, "parameter_id": parameter_id},
            {"event": "trial_done", "t": reported + 0.01, "pid": pid, "cpu_s": 0.5}]


def test_hops_are_joined_by_what_each_trial_received():
    """Two trials on one slot: every hop is the difference of its own two moments, the trial's parameter id
    is the one it received (NNI may hand a trial another's), and the slot's idle time is what the two
    lifetimes leave of the span."""
    events = [{"event": "tuner_asked", "t": 0.0, "pid": 1, "parameter_ids": [0]},
              {"event": "tuner_proposed", "t": 0.1, "pid": 1, "parameter_ids": [0]},
              {"event": "tuner_result", "t": 2.05, "pid": 1, "parameter_id": 0},
              {"event": "tuner_asked", "t": 2.5, "pid": 1, "parameter_ids": [1]},
              {"event": "tuner_proposed", "t": 2.9, "pid": 1, "parameter_ids": [1]},
              {"event": "tuner_result", "t": 5.0, "pid": 1, "parameter_id": 1},
              {"event": "tuner_call", "t": 0.0, "pid": 1, "call": "update_search_space", "s": 0.05, "cpu_s": 0.05},
              {"event": "tuner_call", "t": 0.5, "pid": 1, "call": "generate_multiple_parameters", "s": 0.2,
               "cpu_s": 0.15},
              {"event": "tuner_call", "t": 2.05, "pid": 1, "call": "receive_trial_result", "s": 0.25, "cpu_s": 0.05},
              *_trial(10, 0.4, 0.6, 0.7, 1.9, 2.0, 0, "A"),
              *_trial(11, 3.0, 3.2, 3.3, 4.8, 4.9, 1, "B")]
    jobs = [{"trialJobId": "A", "endTime": 2100}, {"trialJobId": "B", "endTime": 5100}]
    pace = nnipace.trial_hops(events, jobs, concurrency=1)
    hops = {k: round(v, 6) for k, v in pace["hops"].items()}
    assert hops == {"tuner holds": 0.25, "to process": 0.2, "imports": 0.2, "parameters": 0.1, "measure": 1.35,
                    "report": 0.1, "exit": 0.15, "to tuner": 0.075, "slot idle": round((4.7 - 1.7 - 2.1) / 2, 6)}
    assert pace["trials"] == 2 and pace["span_s"] == pytest.approx(4.7)
    # the tuner's calls that started in the span 0.4-5.1 (not the search space's at 0.0): 0.45 s
    assert (pace["tuner_s"], pace["tuner_busy"]) == pytest.approx((0.45 / 2, 0.45 / 4.7))
    assert pace["stages"] == {"build": 1.0, "run": 0.25}
    # run: 0.2 and 0.3; the tuner: its calls' CPU seconds in the span, 0.15 + 0.05, over the two trials
    assert pace["cpu_s"] == pytest.approx({"build": 0.9, "run": 0.25, "trial process": 0.5, "tuner": 0.1})
    assert pace["run_s"] == pytest.approx({"load": 0.01, "timing": 0.25})
    # the lock held 1.6-1.85 and 4.5-4.75 of the span 0.4-5.1; free 4.5 - 1.85 between the two; before the
    # first hold 1.6 - 0.4, after the last 5.1 - 4.75; two trials are too few for a steady rate
    assert (pace["device_held"], pace["lock_free_s"]) == pytest.approx((0.5 / 4.7, 2.65))
    assert pace["device_ends_s"] == pytest.approx(1.2 + 0.35) and pace["steady_trials_per_s"] is None
    assert pace["device_before_s"] == pytest.approx(1.2)


def test_a_trial_without_a_full_timeline_is_left_out():
    events = _trial(10, 0.0, 0.1, 0.2, 1.0, 1.1, 0, "A")[:3]  # killed while measuring
    pace = nnipace.trial_hops(events, [{"trialJobId": "A"}], concurrency=1)
    assert pace["trials"] == 0 and pace["hops"]["measure"] is None


def test_timeline_marks_only_where_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(timeline.ENV, raising=False)
    timeline.mark("nothing")
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(timeline.ENV, str(tmp_path))
    timeline.mark_process_start("started")
    timeline.mark("asked", parameter_ids=[3])
    (tmp_path / "torn.jsonl").write_text('{"event": "x", "t": 1')  # a process killed mid-write
    events = timeline.read(str(tmp_path))
    assert [e["event"] for e in events] == ["started", "asked"] and events[1]["parameter_ids"] == [3]
    assert events[0]["t"] <= events[1]["t"] and events[0]["pid"] == os.getpid()


def test_concurrency_follows_the_gpus_and_the_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert write.auto_concurrency(gpus=1) == write.IN_FLIGHT_PER_GPU
    assert write.auto_concurrency(gpus=4) == 64  # one build worker a core
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert write.auto_concurrency(gpus=1) == registry.CONCURRENCY
    assert write.auto_concurrency(gpus=0) == registry.CONCURRENCY
    assert write.auto_concurrency("llvm") == registry.CONCURRENCY  # the CPU: a timing has the cores to itself


def test_the_written_config_keeps_opevo_busy_at_its_concurrency(tmp_path):
    folder = write.write(parse("mm", "N32K32M32"), tmp_path, max_trials=8, concurrency=24, arch="auto")
    config = (folder / "config_opevo.yml").read_text()
    assert "--concurrency 24" in config.splitlines()[0]
    data = yaml.safe_load(config)
    assert data["trialConcurrency"] == 24 and data["tuner"]["classArgs"]["offspring_size"] == 24
    assert write.main(["mm", "N32K32M32", "--root", str(tmp_path), "--concurrency", "auto"]) == 0
    assert yaml.safe_load((folder / "config_opevo.yml").read_text())["trialConcurrency"] >= registry.CONCURRENCY


def test_nnictl_pace_on_the_cpu(tmp_path, capsys):
    """A real nnictl experiment with timelines on: every trial's hops measured, the table printed."""
    out = tmp_path / "pace.json"
    code = nnipace.main(["mm/N16K16M16", "--trials", "6", "--concurrency", "2", "--target", "llvm",
                         "--port", str(free_port()), "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    row = json.loads(out.read_text())[0]
    assert row["measured"] == row["ok"] == row["trials"] == 6 and row["nni_status"] == "DONE"
    assert all(row["hops"][hop] is not None for hop in nnipace.HOPS), row["hops"]
    # every hop but `to process` is a wait forward in time: NNI may start a process before its parameters exist
    assert all(row["hops"][hop] >= 0 for hop in nnipace.HOPS if hop != "to process"), row["hops"]
    assert row["stages"]["build"] > 0 and 0 < row["trials_per_s_with_start"] < row["trials_per_s"]
    assert 0 < row["tuner_s"] and 0 < row["tuner_busy"] < 1  # the tuner's calls, timed in NNI's dispatcher
    assert set(row["run_s"]) == set(nnipace.RUN_PARTS) and row["run_s"]["timing"] > 0  # the run's steps, measured
    assert "| all | 2 | 6 | 6 |" in printed


def test_an_rpc_runner_among_the_gpu_sets_is_a_row_of_the_same_table(monkeypatch, capsys):
    """`--gpus 0,1 rpc://...`: the local pair and the RPC pair in one command, each rate also as a ratio to the
    first row's; the runner is checked as --runner is."""
    ran = []

    def experiment(wl, tuner, trials, concurrency, gpus, port, target, runner):
        ran.append((gpus, runner, concurrency))
        rate = 6.0 if runner == "local" else 4.5
        return {"gpus": runner if runner != "local" else gpus, "concurrency": concurrency, "measured": trials,
                "ok": trials, "devices": ["GPU"], "trials_per_s": rate, "trials_per_s_with_start": rate - 1,
                "start_s": 7.0, "hops": {hop: 0.1 for hop in nnipace.HOPS}, "steady_trials_per_s": rate * 1.5,
                "stages": {}, "run_s": {}}

    monkeypatch.setattr(nnipace, "experiment", experiment)
    assert nnipace.main(["mm/N512K1024M1024", "--trials", "8", "--gpus", "0,1", "rpc://127.0.0.1:9190/h200",
                         "--concurrency", "32"]) == 0
    assert ran == [("0,1", "local", 32), (None, "rpc://127.0.0.1:9190/h200", 32)]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| rpc://")]
    assert lines[-1].startswith("| rpc://127.0.0.1:9190/h200 | 32 | 8 | 8 | 4.50 | 0.75 | 3.50 | 7.0 |")
    assert "| 6.75 | 0.75 |" in lines[-1]  # the steady rate and its ratio to the local pair's
    with pytest.raises(SystemExit):
        nnipace.main(["mm/N512K1024M1024", "--gpus", "rpc://nohost"])

"""The model commands: `report`'s rows against their own figures, and `tune`'s arguments and errors."""
import json
import re
import sys
import types

import pytest

from experiments.model.__main__ import main
from experiments.model.report import report
from experiments.model.tasks import Task
from model_fixtures import TINY, TINY_TASKS, tiny_model, tiny_records  # noqa: F401


ROW = re.compile(r"^(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x\s+([\d.]+)%\s+(tuned|vendor) \((.*)\)$")


def test_report_rows_agree_with_their_figures(tiny_records):
    made = report(tiny_model(), records=tiny_records, compile=False)
    lines = made.text.splitlines()
    rows = {m[1]: m for m in map(ROW.match, lines) if m}
    assert set(rows) == set(TINY_TASKS)
    for workload, m in rows.items():
        vendor, tuned, speedup = float(m[3]), float(m[4]), float(m[5])
        assert int(m[2]) == TINY_TASKS[workload] and vendor > 0 and tuned > 0
        assert speedup == pytest.approx(vendor / tuned, abs=0.01 + 1e-4 * speedup / min(vendor, tuned))
        if abs(vendor - tuned) > 2e-4:  # beyond the printed rounding: the faster one runs
            assert m[7] == ("tuned" if tuned < vendor else "vendor")
        why, alone = m[8], re.search(r"; the kernel alone ([\d.]+) ms, before torch adds the bias", m[8])
        if m[7] == "tuned":
            assert why == "faster; both timed call by call"
        else:  # where torch's bias made the tuned side lose, the kernel's own time: every task but the bmm
            assert why.startswith("the vendor's is faster") and why.endswith("; both timed call by call")
            assert (alone is not None and float(alone[1]) > 0) == (not workload.startswith("bmm/"))
    for task in made.data["tasks"]:  # report.json's figures are the printed ones
        m = rows[task["workload"]]
        assert (f"{task['vendor_ms']:.4f}", f"{task['tuned_ms']:.4f}", task["use"]) == (m[3], m[4], m[7])
    used = sum(m[7] == "tuned" for m in rows.values())
    assert f"Tasks: {len(TINY_TASKS)}, a tuned kernel is faster for {used}" in lines
    kept = next(x for x in lines if x.startswith("the tuned model: "))
    assert ("no tuned kernel is faster" in kept) if used == 0 else re.search(r"[\d.]+ ms with the tuned kernels", kept)
    check = next(re.fullmatch(r"max \|tuned - torch\| / max \|torch\| = (\S+), tolerance 1e-03 \(float32\): (\w+)", x)
                 for x in lines if x.startswith("max |tuned"))
    assert check[2] == "ok" and made.output_ok and float(check[1]) < 1e-3
    latency = {m[1]: (float(m[3]), bool(m[2])) for m in (re.match(
        r"^(eager|tuned)( \(= untouched: no kernel kept\))?\s+([\d.]+)\s+[\d.]+x  call by call$", x) for x in lines) if m}
    assert set(latency) == {"eager", "tuned"} and all(ms > 0 for ms, _ in latency.values())
    assert latency["tuned"][1] == kept.startswith(("the tuned model: no tuned kernel", "the tuned model: the untouched"))
    assert lines[-1] == "torch.compile rows skipped (--no-compile)"


@pytest.mark.parametrize("raised, says", [
    (RuntimeError("Inductor: no kernel for this op\nmore"), "failed: RuntimeError: Inductor: no kernel for this op"),
    (KeyboardInterrupt(), "torch.compile rows interrupted (Ctrl-C): left out")])
def test_a_compile_that_fails_or_is_interrupted_leaves_the_report_standing(tiny_records, monkeypatch, raised, says):
    """Inductor's failure is its rows' result, Ctrl-C while it compiles leaves them out; the lines said as
    they are measured are the report's text, eager and tuned before any compile."""
    import torch

    def compile_fails(module, mode=None):
        raise raised

    monkeypatch.setattr(torch, "compile", compile_fails)
    said = []
    made = report(tiny_model(), records=tiny_records, compile=True, say=said.append)
    assert made.output_ok and made.text.splitlines() == said
    eager, tuned = (next(i for i, x in enumerate(said) if x.startswith(name + " ")) for name in ("eager", "tuned"))
    compiling = next(i for i, x in enumerate(said) if x.startswith("(torch.compile"))
    assert eager < tuned < compiling and any(says in x for x in said[compiling:])
    if isinstance(raised, KeyboardInterrupt):
        assert said[-1] == says
    else:
        rows = [x for x in said if x.startswith(("torch.compile (mode", "tuned, torch.compile"))]
        assert len(rows) == 2 and all(says in x and " - " in x for x in rows)


def test_report_command(tmp_path, capsys):
    """The report printed, and its figures in OUT/report.json, the same as printed."""
    folder = tmp_path / "out"
    assert main(["report", TINY, "--target", "llvm", "--no-compile", "--out", str(folder)]) == 0  # an empty store
    out = capsys.readouterr().out
    assert "no verified record on this device" in out and "tolerance 1e-03 (float32): ok" in out
    assert "torch.compile rows skipped (--no-compile)" in out and f"wrote {folder / 'report.json'}" in out
    data = json.loads((folder / "report.json").read_text())
    assert {t["workload"]: t["count"] for t in data["tasks"]} == TINY_TASKS
    assert all(t["use"] == "vendor" and t["why"] == "no verified record on this device" for t in data["tasks"])
    assert data["output"]["ok"] and data["output"]["tolerance"] == 1e-3 and set(data["latency"]) == {"eager", "tuned"}
    printed = {"eager": "eager", "tuned": "tuned (= untouched: no kernel kept)"}  # no record: the module is kept
    for name, figure in data["latency"].items():
        assert re.search(rf"^{re.escape(printed[name])}\s+{figure['ms']:.4f}\s", out, re.M)
        assert figure["timed"] == "call by call"
    (tmp_path / "m.onnx").write_bytes(b"")
    assert main(["report", str(tmp_path / "m.onnx"), "--target", "llvm"]) == 2
    assert "report runs a PyTorch model" in capsys.readouterr().err


def test_tune_command_passes_the_tasks_and_budget(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("experiments.model.tune")
    fake.tune = lambda tasks, out, trials, minutes, target="auto", retune=False, port=8080: calls.append(
        (tasks, out, trials, minutes, target, retune, port)) or {}
    monkeypatch.setitem(sys.modules, "experiments.model.tune", fake)
    assert main(["tune", TINY, "--target", "llvm", "--trials", "12", "--retune", "--port", "8131",
                 "--out", str(tmp_path)]) == 0
    (tasks, out, trials, minutes, target, retune, port), = calls
    assert all(isinstance(t, Task) for t in tasks) and {t.workload for t in tasks} == set(TINY_TASKS)
    assert (out, trials, minutes, target, retune, port) == (tmp_path, 12, None, "llvm", True, 8131)
    assert (tmp_path / "tasks.json").exists()


def test_tune_command_reads_the_tasks_json_of_the_same_options(tmp_path, monkeypatch, capsys):
    """A second tune of the same model and options takes its tasks (in their order) from tasks.json; other
    options profile the model again."""
    calls = []
    fake = types.ModuleType("experiments.model.tune")
    fake.tune = lambda tasks, *args, **kwargs: calls.append(tasks) or {}
    monkeypatch.setitem(sys.modules, "experiments.model.tune", fake)
    argv = ["tune", TINY, "--target", "llvm", "--trials", "12", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "tasks (" in capsys.readouterr().out
    profiled = [t.workload for t in calls[0]]

    def not_again(*args, **kwargs):
        raise AssertionError("the model was loaded again")

    with monkeypatch.context() as mp:
        mp.setattr("experiments.model.load.load", not_again)
        assert main(argv) == 0
    assert f"tasks from {tmp_path / 'tasks.json'}" in capsys.readouterr().out
    assert [t.workload for t in calls[1]] == profiled and all(isinstance(t, Task) for t in calls[1])
    assert main([*argv, "--seq", "64"]) == 0  # another option: profiled again
    assert "tasks from" not in capsys.readouterr().out and len(calls) == 3


def test_tune_command_a_bad_budget_is_a_message(tmp_path, capsys):
    assert main(["tune", TINY, "--target", "llvm", "--trials", "3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: a budget of 3 trials is smaller than the warm-up round: 6 tasks")
    assert "Traceback" not in err and not (tmp_path / "manifest.json").exists()


def test_tune_command_an_nnictl_failure_is_a_message(tmp_path, monkeypatch, capsys):
    fake = types.ModuleType("experiments.model.tune")

    def fails(*args, **kwargs):
        raise RuntimeError("nnictl create --config c.yml failed (1):\nport 8150 is in use")

    fake.tune = fails
    monkeypatch.setitem(sys.modules, "experiments.model.tune", fake)
    assert main(["tune", TINY, "--target", "llvm", "--trials", "12", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: tuning stopped, an NNI experiment failed: nnictl create") and "port 8150" in err
    assert "run the same command again to resume" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["tune", TINY],  # no budget
    ["tune", TINY, "--trials", "5", "--minutes", "2"],  # both
    ["tune", TINY, "--trials", "0"],
])
def test_tune_command_needs_one_budget(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "trials" in capsys.readouterr().err

"""Kernels in: the tiny model with its recorded kernels (measured here on llvm) runs them through TVM, with
its output unchanged; the report; the tune command's arguments."""
import sys
import types

import pytest

import torch

from experiments.model import apply, kernels
from experiments.model.__main__ import main
from experiments.model.apply import TOLERANCE, Tuned, difference
from experiments.model.errors import ModelError
from experiments.model.report import report
from experiments.model.tasks import Task
from model_fixtures import TINY, TINY_TASKS, tiny_model, tiny_records  # noqa: F401
from trial import templates
from trial.records import Records
from trial.results import MeasureResult, Status
from trial.workload import parse_name


def _tuned_nodes(gm):
    return {m.workload for m in gm.modules() if isinstance(m, Tuned)}


def test_forced_kernels_run_through_tvm_and_keep_the_output(tiny_records):
    model = tiny_model()
    tuned = apply(model.module, model.inputs, target="llvm", records=tiny_records, min_run_time=0.01, force=True)
    assert {c.workload for c in tuned.opevo_choices if c.use == "tuned"} == set(TINY_TASKS)
    assert _tuned_nodes(tuned) == set(TINY_TASKS)
    before = kernels.CALLS.copy()
    with torch.no_grad():
        want, got = model.module(*model.inputs), tuned(*model.inputs)
    assert difference(got, want) <= TOLERANCE[torch.float32]
    assert {w: kernels.CALLS[w] - before[w] for w in TINY_TASKS} == TINY_TASKS  # each call ran TVM's kernel
    for workload in TINY_TASKS:  # built once, next to the records, from the fastest record's knobs
        best = kernels.best(workload, model.target, tiny_records)
        assert kernels.folder(workload, best.params, model.target, tiny_records).joinpath("kernel.so").exists()


def test_torch_compile_traces_around_the_kernels(tiny_records):
    model = tiny_model()
    tuned = apply(model.module, model.inputs, target="llvm", records=tiny_records, min_run_time=0.01, force=True)
    compiled = torch.compile(tuned, backend="aot_eager", fullgraph=True)  # fake tensors through opevo::kernel
    before = kernels.CALLS.copy()
    with torch.no_grad():
        got = compiled(*model.inputs)
        want = model.module(*model.inputs)
    assert difference(got, want) <= TOLERANCE[torch.float32]
    assert all(kernels.CALLS[w] > before[w] for w in TINY_TASKS)


def test_apply_keeps_the_faster_of_torch_and_the_kernel(tiny_records):
    model = tiny_model()
    tuned = apply(model.module, model.inputs, target="llvm", records=tiny_records, min_run_time=0.01)
    for c in tuned.opevo_choices:
        assert c.vendor_ms > 0 and c.tuned_ms > 0
        assert c.use == ("tuned" if c.tuned_ms < c.vendor_ms else "vendor")
    assert _tuned_nodes(tuned) == {c.workload for c in tuned.opevo_choices if c.use == "tuned"}
    with torch.no_grad():
        assert difference(tuned(*model.inputs), model.module(*model.inputs)) <= TOLERANCE[torch.float32]


def test_an_unverified_kernel_in_the_folder_is_built_again(tiny_records, tmp_path):
    """A kernel.so without the VERIFIED mark (the service writes it before verifying; a crash leaves it) is
    never loaded: the kernel is built again, verified, and put in its place."""
    model, workload = tiny_model(), "mm/N2K32M10PNT"
    params = kernels.best(workload, model.target, tiny_records).params
    store = Records(tmp_path / "records.sqlite")  # the kernels' folder is beside this store
    out = kernels.folder(workload, params, model.target, store)
    out.mkdir(parents=True)
    (out / "kernel.so").write_bytes(b"half a library")
    library = kernels.build(workload, params, model.target, "llvm", store)
    assert library == out / "kernel.so" and (out / kernels.VERIFIED).exists()
    assert library.read_bytes() != b"half a library"
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no build folder left beside it
    a, w = torch.randn(2, 32), torch.randn(10, 32)
    got = torch.ops.opevo.kernel(a, w, kernels.load(workload, library))
    torch.testing.assert_close(got, a @ w.t(), rtol=1e-4, atol=1e-4)


def test_a_kernel_that_fails_its_check_leaves_nothing_to_load(tiny_records, tmp_path, monkeypatch):
    model, workload = tiny_model(), "mm/N2K32M10PNT"
    params = kernels.best(workload, model.target, tiny_records).params

    def writes_then_fails(wl, params, options, keep):
        (keep / "kernel.so").write_bytes(b"built, not verified")
        return MeasureResult(Status.WRONG_RESULT, "differs from the reference")

    monkeypatch.setattr(kernels, "measure", writes_then_fails)
    store = Records(tmp_path / "records.sqlite")
    with pytest.raises(ModelError, match="wrong_result: differs from the reference"):
        kernels.build(workload, params, model.target, "llvm", store)
    out = kernels.folder(workload, params, model.target, store)
    assert not out.exists() and not any(out.parent.iterdir())


def test_records_of_another_device_are_not_used(tmp_path):
    model = tiny_model()
    records = Records(tmp_path / "records.sqlite")
    wl = parse_name("mm/N128K32M32PNT")
    params = templates.candidates(wl)[-1].default_params(wl, True)  # a GPU's hand-picked knobs
    records.append(wl, MeasureResult(Status.OK, "", params, gflops=1.0, latency_ms=1.0, target="cuda sm_90",
                                     device="NVIDIA H100 80GB HBM3"))
    tuned = apply(model.module, model.inputs, target="llvm", records=records, min_run_time=0.01, force=True)
    choice = next(c for c in tuned.opevo_choices if c.workload == wl.key)
    assert choice.use == "vendor"
    assert choice.why == f"recorded on NVIDIA H100 80GB HBM3 only, not on this device ({model.target.device_name})"
    other = next(c for c in tuned.opevo_choices if c.workload != wl.key)
    assert other.use == "vendor" and other.why == "no verified record on this device"
    assert not _tuned_nodes(tuned)


def test_report_prints_every_section(tiny_records):
    made = report(tiny_model(), records=tiny_records, compile=False)
    assert made.output_ok
    text = made.text
    for workload in TINY_TASKS:
        assert workload in text
    for heading in ("vendor ms", "tuned ms", "speed-up", "share", "tolerance 1e-03 (float32): ok",
                    "End-to-end latency", "eager", "tuned", "torch.compile rows skipped (--no-compile)"):
        assert heading in text


def test_report_command(tmp_path, capsys):
    assert main(["report", TINY, "--target", "llvm", "--no-compile"]) == 0  # an empty store: torch's ops run
    out = capsys.readouterr().out
    assert "no verified record on this device" in out and "tolerance 1e-03 (float32): ok" in out
    assert "torch.compile rows skipped (--no-compile)" in out
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


def test_difference_bounds_every_output_and_fails_on_nan_or_shape():
    want = (torch.ones(3), {"b": torch.full((2,), 4.0)})
    assert difference((torch.ones(3), {"b": torch.tensor([4.0, 4.2])}), want) == pytest.approx(0.05, rel=1e-5)
    assert not difference((torch.tensor([1.0, float("nan"), 1.0]), want[1]), want) <= 1.0
    assert difference((torch.ones(4), want[1]), want) == float("inf")

"""Kernels in: the tiny model with its recorded kernels (measured here on llvm) runs them through TVM, with
its output unchanged, where they are faster than torch's operators."""
import pytest

import torch

from experiments.model import apply, kernels, ops, timing
from experiments.model.apply import TOLERANCE, Tuned, difference
from experiments.model.errors import ModelError
from model_fixtures import TINY_TASKS, tiny_model, tiny_records  # noqa: F401
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


def test_a_tuned_model_call_parses_no_workload(tiny_records, monkeypatch):
    """The hot path: a call of the tuned model parses no workload name and looks no op up; it only compares
    each call's workload key with its kernel's."""
    model = tiny_model()
    tuned = apply(model.module, model.inputs, target="llvm", records=tiny_records, min_run_time=0.01, force=True)

    def forbidden(*args, **kwargs):
        raise AssertionError("called on the hot path")

    for module, name in ((kernels, "parse_name"), (ops, "parse_name"), (ops, "op_name"), (ops, "plan")):
        monkeypatch.setattr(module, name, forbidden)
    before = kernels.CALLS.copy()
    with torch.no_grad():
        got = tuned(*model.inputs)
    assert {w: kernels.CALLS[w] - before[w] for w in TINY_TASKS} == TINY_TASKS
    monkeypatch.undo()
    with torch.no_grad():
        assert difference(got, model.module(*model.inputs)) <= TOLERANCE[torch.float32]


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


def test_apply_keeps_the_faster_of_torch_and_the_kernel(tiny_records, monkeypatch):
    """Timed as made up here (torch's op faster for every other workload), the tuned model runs the kernel
    exactly where it was the faster, and each choice keeps the figures and how they were timed."""
    verdicts = []

    def made_up(vendor, tuned, gpu, min_run_time):
        vendor(), tuned()  # both runnable on the node's own arguments
        verdicts.append("vendor" if len(verdicts) % 2 else "tuned")
        return (1.0, 2.0, "made up") if verdicts[-1] == "vendor" else (2.0, 0.5, "made up")

    monkeypatch.setattr(timing, "pair_ms", made_up)
    monkeypatch.setattr(timing, "model_latency", lambda module, inputs, gpu, min_run_time: timing.Latency(
        1.0 if isinstance(module, torch.fx.GraphModule) else 2.0, "made up"))  # the changed graph is faster
    model = tiny_model()
    tuned = apply(model.module, model.inputs, target="llvm", records=tiny_records, min_run_time=0.01)
    assert tuned.opevo_kept == "the graph with the tuned kernels: 1.0000 ms with the tuned kernels against " \
                               "2.0000 ms untouched (made up)"
    assert [c.use for c in tuned.opevo_choices] == verdicts and len(verdicts) == len(TINY_TASKS)
    for c in tuned.opevo_choices:
        assert (c.vendor_ms, c.tuned_ms, c.timed) == ((1.0, 2.0) if c.use == "vendor" else (2.0, 0.5)) + ("made up",)
        assert c.why == ("faster" if c.use == "tuned" else "the vendor's is faster")
        # where the tuned side lost, its kernel alone too, if torch adds a bias after it (all but the bmm)
        alone = c.use == "vendor" and not c.workload.startswith("bmm/")
        assert (c.kernel_ms is not None and c.kernel_ms > 0, c.epilogue) == ((True, "bias") if alone else (False, ""))
    picked = {c.workload for c in tuned.opevo_choices if c.use == "tuned"}
    assert _tuned_nodes(tuned) == picked and len(picked) == 3
    before = kernels.CALLS.copy()
    with torch.no_grad():
        assert difference(tuned(*model.inputs), model.module(*model.inputs)) <= TOLERANCE[torch.float32]
    assert {w for w in TINY_TASKS if kernels.CALLS[w] > before[w]} == picked


def test_the_untouched_model_is_kept_where_the_changed_graph_is_not_faster(tiny_records, monkeypatch):
    """Each kernel beats torch's operator, but the whole changed graph times slower (the exported graph's own
    cost, on the CPU): applying returns the module itself, and says why."""
    monkeypatch.setattr(timing, "pair_ms", lambda vendor, tuned, gpu, min_run_time: (2.0, 1.0, "made up"))
    monkeypatch.setattr(timing, "model_latency", lambda module, inputs, gpu, min_run_time: timing.Latency(
        3.0 if isinstance(module, torch.fx.GraphModule) else 2.0, "made up"))
    model = tiny_model()
    kept = apply(model.module, model.inputs, target="llvm", records=tiny_records, min_run_time=0.01)
    assert kept is model.module and not _tuned_nodes(kept)
    assert all(c.use == "tuned" for c in kept.opevo_choices)
    assert kept.opevo_kept == "the untouched model, as the faster: 3.0000 ms with the tuned kernels against " \
                              "2.0000 ms untouched (made up)"


def test_a_pair_that_cannot_be_captured_is_timed_call_by_call_both(monkeypatch):
    """Where one of the two cannot be captured in a CUDA graph, neither is timed from one."""
    calls = []

    def graphed(fn):
        if fn is tuned:
            raise RuntimeError("operation not permitted when stream is capturing")
        return lambda: calls.append("replay")

    def vendor():
        calls.append("vendor")

    def tuned():
        calls.append("tuned")

    monkeypatch.setattr(timing, "_graphed", graphed)
    vendor_ms, tuned_ms, how = timing.pair_ms(vendor, tuned, gpu=True, min_run_time=0.001)
    assert how == "call by call (no CUDA graph: operation not permitted when stream is capturing)"
    assert "replay" not in calls and {"vendor", "tuned"} <= set(calls) and vendor_ms > 0 and tuned_ms > 0
    calls.clear()
    monkeypatch.setattr(timing, "_graphed", lambda fn: lambda: calls.append("replay"))
    assert timing.pair_ms(vendor, tuned, gpu=True, min_run_time=0.001)[2] == "CUDA graph"
    assert set(calls) == {"replay"}
    calls.clear()  # one more timed as a pair was: from a graph where the pair was, else call by call
    assert timing.like_ms(vendor, "CUDA graph", min_run_time=0.001) > 0 and set(calls) == {"replay"}
    calls.clear()
    assert timing.like_ms(vendor, how, min_run_time=0.001) > 0 and set(calls) == {"vendor"}


def test_torchs_side_is_timed_after_as_many_cudnn_searches_as_the_vendor_baselines(monkeypatch):
    """With cudnn.benchmark on a GPU, torch's side of a pair and a model's latency are the fastest of as many
    timings as the vendor baselines take, each captured in a thread of its own with the caller's grad mode;
    the tuned kernel once, in the caller's thread."""
    import contextlib
    import threading

    from trial.vendor import CUDNN_SEARCHES

    captured = []

    def graphed(fn):
        captured.append((fn.__name__, threading.current_thread() is threading.main_thread(), torch.is_grad_enabled()))
        return fn

    def vendor():
        pass

    def tuned():
        pass

    monkeypatch.setattr(timing, "_graphed", graphed)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    assert timing.pair_ms(vendor, tuned, gpu=True, min_run_time=0.001)[2] == "CUDA graph"
    searched = [("vendor", False, True)] * CUDNN_SEARCHES
    assert captured == [("vendor", True, True), ("tuned", True, True), *searched]
    captured.clear()
    assert timing.model_latency(lambda: None, (), gpu=True, min_run_time=0.001).how == "CUDA graph"
    assert captured == [("call", False, False)] * CUDNN_SEARCHES  # under the caller's torch.no_grad
    captured.clear()
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)  # PyTorch's default: cuDNN's heuristics
    timing.pair_ms(vendor, tuned, gpu=True, min_run_time=0.001)
    assert captured == [("vendor", True, True), ("tuned", True, True), ("vendor", True, True)]


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


def test_difference_bounds_every_output_and_fails_on_nan_or_shape():
    want = (torch.ones(3), {"b": torch.full((2,), 4.0)})
    assert difference((torch.ones(3), {"b": torch.tensor([4.0, 4.2])}), want) == pytest.approx(0.05, rel=1e-5)
    assert not difference((torch.tensor([1.0, float("nan"), 1.0]), want[1]), want) <= 1.0
    assert difference((torch.ones(4), want[1]), want) == float("inf")


def test_the_report_has_cudnn_time_every_engine_configuration_and_gives_the_settings_back():
    cudnn = torch.backends.cudnn
    before = cudnn.benchmark, cudnn.benchmark_limit
    with timing.cudnn_benchmark():
        assert cudnn.benchmark and cudnn.benchmark_limit == 0
    assert (cudnn.benchmark, cudnn.benchmark_limit) == before

"""The vendor baselines (trial.vendor, benchmarks.vendor) where there is no GPU: no figure, and the command says why;
the GPU check's verdict and rows."""
import contextlib
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import gpucheck, handpicked, vendor
from benchmarks.handpicked import cells
from trial import templates
from trial import vendor as library
from trial.vendor import baseline
from trial.verify import make_inputs
from trial.workload import parse, parse_name


def test_vendor_baseline_only_on_cuda():
    wl = parse("mm", "N32K32M32")
    assert baseline(wl, "llvm") is None and baseline(wl, "") is None


def test_vendor_command_says_why_it_has_no_figure(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without PyTorch: `import torch` fails
    assert vendor.main(["conv/N8C3HW16F4K3ST1PD1", "--cudnn-heuristics"]) == 1
    assert "conv/N8C3HW16F4K3ST1PD1: no vendor figure (it needs PyTorch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vendor.main(["conv/N8C3HW16"])
    assert "N8C3HW16" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["mm/N64K48M40", "mm/N32K64M48PTT", "bmm/B3N16K32M24PNT", "mm/N32K64M48PNT_f16",
                                  "mm/N32K64M48PTN_bf16", "mm/N32K64M48_i8", "mm/N64K64M64PNT_tf32",
                                  "conv/N2C4HW9F6K3ST2PD1", "conv/N2C5HW8F3K3ST1PD1", "conv/N2C8HW9F8K3ST2PD1_f16",
                                  "conv/N1C16HW7F8K1ST1PD0_bf16", "conv/N1C4HW7F8K3ST1PD1_tf32"])
def test_the_library_computes_on_the_suites_inputs_and_is_checked_against_its_reference(name):
    """On the CPU build of PyTorch (its own kernels, not cuBLAS/cuDNN): the call the baseline times takes the
    suite's seeded inputs in the workload's type and layout, its output passes the float64 reference the
    suite's kernels pass, and a wrong output does not."""
    import torch

    wl = parse_name(name)
    a, b = library.operands(wl, torch, "cpu")
    want = [x.astype("float64") for x in make_inputs(wl)]
    assert [tuple(t.shape) for t in (a, b)] == [w.shape for w in want] == list(wl.input_shapes)
    assert all(np.array_equal(t.double().numpy(), w) for t, w in zip((a, b), want))  # the same values, exactly
    assert a.dtype == b.dtype == getattr(torch, wl.element.tvm)
    label, call = library.library_call(wl, torch, "cpu")
    out = call()
    assert tuple(out.shape) == wl.output_shape and library.check(wl, out) is None
    wrong = out.clone()
    wrong.view(-1)[-1] += 1000  # the last output is among those checked (sample_indices keeps the corners)
    assert library.check(wl, wrong).startswith("1 of ")


def test_tf32_is_timed_with_tf32_on_and_float32_with_it_off(monkeypatch):
    """A TF32 workload's call is cuBLAS with allow_tf32 on (PyTorch's TF32 matmul), a float32 one's with it off, and
    the process's setting is given back."""
    import torch

    seen, before = [], torch.backends.cuda.matmul.allow_tf32
    monkeypatch.setattr(library, "_timed", lambda *a: seen.append(torch.backends.cuda.matmul.allow_tf32))
    for name in ("mm/N64K64M64PNT_tf32", "mm/N64K64M64PNT", "mm/N64K64M64PNT_tf32"):
        library.time_vendor(parse_name(name))
    assert seen == [True, False, True] and torch.backends.cuda.matmul.allow_tf32 == before
    assert library.library_call(parse_name("mm/N64K64M64PNT_tf32"), torch, "cpu")[0] == "cuBLAS TF32 (allow_tf32 on)"


def test_cudnn_times_every_engine_configuration_and_the_process_gets_its_settings_back(monkeypatch):
    """cuDNN's benchmark mode times every engine configuration (benchmark_limit 0, its fastest documented path),
    not PyTorch's default first 10, and only while the vendor is timed."""
    import torch

    cudnn, seen = torch.backends.cudnn, []
    monkeypatch.setattr(cudnn, "benchmark_limit", 10)
    monkeypatch.setattr(library, "_timed", lambda *a: seen.append((cudnn.benchmark, cudnn.benchmark_limit)))
    library.time_vendor(parse_name("conv/N2C4HW9F6K3ST2PD1"))
    library.time_vendor(parse_name("conv/N2C4HW9F6K3ST2PD1"), cudnn_benchmark=False)
    assert seen == [(True, 0), (False, 0)] and cudnn.benchmark_limit == 10


def test_a_convolutions_figure_is_cudnns_fastest_pick_of_searches_each_in_a_thread_of_its_own():
    """PyTorch keeps cuDNN's pick per thread: each search runs where nothing was picked yet (a thread-local is
    unset), on the caller's device; the figure is the fastest search's, and every search's latency is kept."""
    local, seen, devices = threading.local(), [], []
    latencies = iter([0.0500, 0.0441, 0.0525])

    def timed():
        seen.append(getattr(local, "picked", False))
        local.picked = True
        return {"library": "cuDNN", "latency_ms": next(latencies)}

    cuda = SimpleNamespace(current_device=lambda: 1, device=lambda d: devices.append(d) or contextlib.nullcontext())
    got = library.fastest_search(SimpleNamespace(cuda=cuda), timed, searches=3)
    assert seen == [False, False, False] and devices == [1, 1, 1]
    assert got == {"library": "cuDNN", "latency_ms": 0.0441, "searches": [0.0500, 0.0441, 0.0525]}


def test_only_a_convolution_that_cudnn_searches_for_is_timed_again(monkeypatch):
    """A matmul, and a convolution with cuDNN's heuristics, are timed once; a searched convolution by
    `fastest_search`."""
    searched = []
    monkeypatch.setattr(library, "library_call", lambda wl, torch: ("library", lambda: None))
    monkeypatch.setattr(library, "time_call", lambda *a: {"latency_ms": 1.0})
    monkeypatch.setattr(library, "fastest_search", lambda torch, timed: searched.append(timed()) or {"searched": 1})
    conv = parse_name("conv/N2C4HW9F6K3ST2PD1")
    assert library.time_vendor(conv) == {"searched": 1} and searched == [{"latency_ms": 1.0}]
    assert library.time_vendor(conv, cudnn_benchmark=False) == {"latency_ms": 1.0}
    assert library.time_vendor(parse_name("mm/N64K64M64")) == {"latency_ms": 1.0} and len(searched) == 1


def test_a_compiled_convolution_is_timed_after_as_many_cudnn_searches_as_the_library(monkeypatch):
    """torch.compile's call of a searched convolution runs cuDNN's search per thread as the library's does: it
    is compiled once, then timed by `fastest_search`, with its compilation time; a compiled matmul once."""
    import torch

    compiled = []
    monkeypatch.setattr(library, "library_call", lambda wl, torch: ("cuDNN", lambda: None))
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiled.append(kw["mode"]) or fn)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(library, "time_call", lambda wl, torch, name, *a: {"library": name, "latency_ms": 1.0})
    monkeypatch.setattr(library, "fastest_search", lambda torch, timed: {**timed(), "searches": [1.0]})
    got = library.time_vendor(parse_name("conv/N2C4HW9F6K3ST2PD1"), compile_mode="max-autotune")
    assert compiled == ["max-autotune"] and got["library"] == "torch.compile max-autotune of cuDNN"
    assert got["searches"] == [1.0] and got["compile_s"] >= 0
    got = library.time_vendor(parse_name("mm/N64K64M64"), compile_mode="max-autotune")
    assert len(compiled) == 2 and "searches" not in got and got["compile_s"] >= 0


def test_the_peer_compiles_each_workload_afresh_past_dynamos_recompile_limit(monkeypatch):
    """Every workload's library call is the same code object, so one process compiling the peer on more
    shapes than Dynamo's recompile limit would fail on the rest (fullgraph); each compile starts afresh."""
    import torch

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, mode, **kw: real_compile(fn, backend="eager", **kw))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    cpu_call = library.library_call
    monkeypatch.setattr(library, "library_call", lambda wl, torch: cpu_call(wl, torch, "cpu"))
    monkeypatch.setattr(library, "time_call", lambda wl, torch, name, fn, *a: {"check": library.check(wl, fn())})
    shapes = [f"mm/N{8 * (i + 1)}K16M8" for i in range(torch._dynamo.config.recompile_limit + 2)]
    got = [library.time_vendor(parse_name(s), compile_mode="max-autotune") for s in shapes]
    assert [g["check"] for g in got] == [None] * len(shapes) and all(g["compile_s"] >= 0 for g in got)


def test_float8_operands_are_the_suites_values():
    """float8 e4m3 (timed with torch._scaled_mm on a GPU): the operands hold the suite's values exactly."""
    import torch

    wl = parse_name("mm/N32K64M48PNT_e4m3")
    got = library.operands(wl, torch, "cpu")
    assert all(t.dtype == torch.float8_e4m3fn for t in got)
    assert all(np.array_equal(t.float().numpy(), w.astype("float32")) for t, w in zip(got, make_inputs(wl)))


def test_gpucheck_fails_where_the_vendors_output_is_wrong():
    """A vendor figure whose output the float64 reference rejects fails the check, and its row says why."""
    ok = {"workload": "mm/N16K16M16", "status": "ok", "gflops": 2.0, "latency_ms": 1.0, "reason": ""}
    wrong = {**ok, "workload": "mm/N32K32M32", "vendor": {"gflops": 1.0, "check": "1 of 1024 checked outputs differ"}}
    right = {**ok, "vendor": {"gflops": 1.0, "check": None}}
    assert gpucheck.problems([right], {"best_gflops": 1.0}) == []
    assert gpucheck.problems([right, wrong], {"best_gflops": 1.0}) == [
        "the vendor's output differs from the float64 reference: mm/N32K32M32"]
    assert cells(wrong)[-2:] == ["2.00", "vendor's output: 1 of 1024 checked outputs differ"]
    assert cells(right)[-1] == ""


def test_torch_compile_at_the_peers_mode_compiles_the_library_call_whole():
    """The protocol's peer compiles the call the vendor is timed with, in one graph (fullgraph), and what it
    computes passes the same reference; on the CPU build of PyTorch, Inductor's C++ kernels stand in."""
    import torch

    from benchmarks.protocol_run import COMPILE_MODE

    wl = parse_name("mm/N64K64M48PNT")
    _, call = library.library_call(wl, torch, "cpu")
    compiled = torch.compile(call, mode=COMPILE_MODE, fullgraph=True, dynamic=False)
    assert library.check(wl, compiled()) is None


def test_the_operands_and_the_check_share_one_reference(monkeypatch):
    """The seeded inputs (316 MB for the study's 11x11 convolution) and the float64 reference are made once
    for a library call's operands and the check of its output."""
    import torch

    from trial import verify

    made, real = [], verify.make_inputs

    def counted(wl, seed=0):
        made.append(wl)
        return real(wl, seed)

    monkeypatch.setattr(verify, "make_inputs", counted)
    monkeypatch.setattr(library, "make_inputs", counted, raising=False)  # wherever the vendor takes them from
    library.reference_of.cache_clear()
    wl = parse_name("mm/N16K24M8")
    _, call = library.library_call(wl, torch, "cpu")
    assert library.check(wl, call()) is None and made == [wl]


def test_the_gpu_checks_cluster_rows_are_wgmma_kernels_that_share_wide_mn_major_tiles():
    """handpicked.CLUSTERED: on Hopper each is a valid config of the wgmma template whose CTAs share their tile
    across a cluster (split K or a pair), with an MN-major B (NN) two or more 64-wide boxes across."""
    from trial import check
    from trial.archs import target_of
    from trial.templates import wgmma

    sm90 = target_of("sm_90")
    for name, config in handpicked.CLUSTERED.items():
        wl = parse_name(name)
        assert templates.load(wl, target=sm90) is wgmma and wl.layout == "NN", name
        check.check(wl, wgmma, config, sm90)
        assert config["split"] * config["cluster"] > 1 and config["cols"] >= 128, name
    assert [gpucheck.cluster_label(c) for c in handpicked.CLUSTERED.values()] == ["64 x 128, split 2",
                                                                                 "128 x 128, cluster 2"]

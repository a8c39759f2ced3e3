"""The measure path on the CPU: every op and layout verifies; each kind of failure gets its status."""
import dataclasses
import random
import re

import pytest
import tvm

from trial import build, check, templates
from trial.archs import target_of
from trial.measure import Options, measure
from trial.target import DeviceLimits, Target
from trial.templates.common import PIPELINE_DEPTHS
from trial.workload import parse
from searchspace import SearchSpace

FAST = Options(target="llvm", min_repeat_ms=1)

# GPU-sized workloads of each op, lowered to CUDA code for `GPU`, which this machine need not have
GPU_WORKLOADS = [("mm", "N512K1024M1024PTN"), ("bmm", "B960N128K64M128PNT"),
                 ("conv", "N512C3HW227F64K11ST4PD0"), ("conv", "N512C64HW27F192K5ST1PD2")]

SMALL = [("mm", f"N48K32M40P{lay}") for lay in ("NN", "NT", "TN", "TT")] + \
        [("bmm", f"B3N16K24M32P{lay}") for lay in ("NN", "NT", "TN", "TT")] + \
        [("conv", "N2C3HW17F8K3ST2PD1"), ("conv", "N1C5HW9F6K3ST1PD0")]


@pytest.mark.parametrize("op,spec", SMALL)
def test_every_op_and_layout_verifies(op, spec):
    r = measure(parse(op, spec), None, FAST)
    assert r.status == "ok", r.reason
    assert r.gflops > 0 and r.latency_ms > 0 and r.latency_std_ms >= 0 and r.build_s > 0
    assert r.target.startswith("llvm") and r.report()["device"].endswith("(device 0)")


@pytest.mark.parametrize("op,spec,split", [("mm", "N32K48M16PTT", 3), ("mm", "N16K64M24PNT", 8),
                                           ("bmm", "B3N8K32M16PTN", 4)])
def test_split_k_verifies_and_adds_a_summing_kernel(op, spec, split):
    """K[0] > 1: each K slice reduced by its own blocks, then summed; the CPU runs the same two stages."""
    wl = parse(op, spec)
    template = templates.load(wl)
    params = template.default_params(wl, False)
    params["K"] = [split, wl.dims["K"] // split // 4, 2, 2]
    r = measure(wl, params, FAST)
    assert r.status == "ok", r.reason
    gpu = {**template.default_params(wl, True), "K": params["K"]}
    check.check(wl, template, gpu, GPU)
    source = build.build(wl, template, gpu, GPU).mod.imports[0].inspect_source()
    assert "C_rf" in source
    assert source.count("__global__ void") == 4  # two kernels, each declared, then defined


@pytest.mark.parametrize("op,spec", [("mm", "N32K24M16PTN"), ("bmm", "B4N8K12M16PNT"), ("conv", "N2C4HW10F6K3ST2PD1"),
                                     ("conv", "N2C8HW6F8K3ST2PD1_bf16")])
def test_random_configs_verify(op, spec):
    """Configs drawn from the whole search space build and compute the right answer."""
    wl = parse(op, spec)
    space = SearchSpace.from_json(templates.load(wl).search_space(wl))
    rng = random.Random(7)
    for _ in range(3):
        params = space.sample(rng)
        r = measure(wl, params, FAST)
        assert r.status == "ok", (params, r.reason)
        assert r.params == params


def test_blocks_of_several_images_verify_and_lower_to_cuda():
    """`tile_n` puts images in a block beside its filters (virtual threads, threads, each thread's own), so one
    staged filter slice serves them all: the kernel computes the right answer on the CPU, and on the GPU its
    block has the estimated threads and shared memory."""
    small = parse("conv", "N8C3HW13F8K3ST2PD1")
    template = templates.load(small)
    params = {**template.default_params(small, False), "tile_n": [1, 2, 2, 2]}
    r = measure(small, params, FAST)
    assert r.status == "ok", r.reason
    wl = parse("conv", "N512C3HW227F64K11ST4PD0")
    params = {"tile_n": [128, 1, 2, 2], "tile_f": [2, 1, 8, 4], "tile_y": [55, 1, 1, 1], "tile_x": [1, 1, 5, 11],
              "tile_rc": [1, 3], "tile_ry": [11, 1], "tile_rx": [1, 11], "auto_unroll_max_step": 256,
              "unroll_explicit": 1, "pipeline": 3}
    check.check(wl, template, params, GPU)
    source = build.build(wl, template, params, GPU).mod.imports[0].inspect_source()
    use = template.resources(wl, params)
    assert use["threads"] == 2 * 8 * 5 and f"__launch_bounds__({use['threads']})" in source
    assert declared_shared_bytes(source) == use["shared_bytes"] == 3 * 4 * (4 * 3 * 227 + 32 * 3 * 11)


def test_knobs_outside_the_space_are_invalid():
    r = measure(parse("mm", "N64K64M64"), {"K": [1, 4, 4, 2], "X": [1, 1, 8, 8], "Y": [1, 1, 8, 8],
                                            "unroll": 0, "vec": 1}, FAST)
    assert r.status == "invalid"
    assert "K: factors [1, 4, 4, 2] multiply to 32, expected 64" in r.reason
    assert r.build_s is None  # rejected before compiling


GPU = Target("cuda", {"kind": "cuda", "arch": "sm_90"}, "test GPU", 1,
             DeviceLimits(max_threads_per_block=1024, max_thread_dims=(1024, 1024, 64),
                          max_shared_memory_per_block=48 * 1024, max_registers_per_block=65536,
                          max_registers_per_thread=255, warp_size=32))


@pytest.mark.parametrize("op,spec,change,message", [
    ("mm", "N2048K64M2048", {"X": [1, 1, 64, 32], "Y": [1, 1, 32, 64]}, "2048 threads per block > device limit 1024"),
    ("mm", "N2048K2048M2048", {"K": [1, 1, 64, 32], "X": [16, 1, 8, 16], "Y": [16, 1, 8, 16]},
     "bytes of shared memory per block > device limit 49152"),
    ("mm", "N2048K64M2048", {"X": [128, 1, 1, 16], "Y": [64, 1, 1, 32]}, "registers per thread > device limit 255"),
    ("conv", "N1C8HW16F128K3ST1PD1", {"algorithm": "direct", "tile_f": [1, 1, 128, 1], "tile_y": [16, 1, 1, 1],
                                      "tile_x": [16, 1, 1, 1]}, "threadIdx.z extent 128 > device limit 64"),
])
def test_knobs_beyond_gpu_limits_are_invalid(op, spec, change, message):
    wl = parse(op, spec)
    template = templates.load(wl)
    params = {**template.default_params(wl, True), **change}
    with pytest.raises(check.InvalidConfig, match=message):
        check.check(wl, template, params, GPU)


@pytest.mark.parametrize("op,spec,base", [("mm", "N512K1024M1024", {}),
                                          ("conv", "N512C64HW27F192K5ST1PD2", {"algorithm": "direct"})])
def test_pipelined_shared_stages(op, spec, base):
    """pipeline 1 double-buffers the shared tiles; 2, 3, 4 fill that many with cp.async, only where the GPU
    has it."""
    wl = parse(op, spec)
    template = templates.load(wl)
    sources, shared = {}, {}
    for depth in PIPELINE_DEPTHS:
        params = {**template.default_params(wl, True), **base, "pipeline": depth}
        check.check(wl, template, params, GPU)
        sources[depth] = build.build(wl, template, params, GPU).mod.imports[0].inspect_source()
        shared[depth] = template.resources(wl, params)["shared_bytes"]
    declared = {d: declared_shared_bytes(src) for d, src in sources.items()}
    assert declared == shared and [shared[d] for d in PIPELINE_DEPTHS] == [n * shared[0] for n in (1, 2, 2, 3, 4)]
    assert "cp.async" not in sources[0] and "cp.async" not in sources[1]
    assert all(f"cp.async.wait_group {d - 1}" in sources[d] for d in (2, 3, 4))
    turing = dataclasses.replace(GPU, target={"kind": "cuda", "arch": "sm_75"})
    params = {**template.default_params(wl, True), **base, "pipeline": 2}
    with pytest.raises(check.InvalidConfig, match="cp.async"):
        check.check(wl, template, params, turing)
    check.check(wl, template, {**params, "pipeline": 1}, turing)


def declared_shared_bytes(source):
    return sum(int(n) for n in re.findall(r"__shared__ [^;]*\[(\d+)\];", source)) * 4


@pytest.mark.parametrize("op,spec", GPU_WORKLOADS)
def test_gpu_schedules_lower_to_cuda_with_the_estimated_shared_memory(op, spec):
    """The GPU schedules pass TVM's lowering and CUDA code generation without a GPU present, the
    hand-picked default config and random valid ones alike. The parent rejects knobs on `resources()`
    alone, so it must be what the lowered kernel allocates."""
    wl = parse(op, spec)
    template = templates.load(wl)
    default = template.default_params(wl, True)
    check.check(wl, template, default, GPU)
    source = build.build(wl, template, default, GPU).mod.imports[0].inspect_source()
    assert "__global__" in source and "__shared__" in source
    assert declared_shared_bytes(source) == template.resources(wl, default)["shared_bytes"], default

    space, rng, built = SearchSpace.from_json(template.search_space(wl)), random.Random(3), 0
    while built < 4:
        params = space.sample(rng)
        try:
            check.check(wl, template, params, GPU)
        except check.InvalidConfig:
            continue
        source = build.build(wl, template, params, GPU).mod.imports[0].inspect_source()
        assert declared_shared_bytes(source) == template.resources(wl, params)["shared_bytes"], params
        built += 1


@pytest.mark.parametrize("op,spec,change", [
    ("conv", "N512C3HW227F64K11ST4PD0", {"tile_n": [512, 1, 1, 1], "tile_f": [64, 1, 1, 1], "tile_y": [1, 5, 11, 1],
                                          "tile_x": [55, 1, 1, 1], "tile_rc": [3, 1], "tile_ry": [11, 1],
                                          "tile_rx": [11, 1]}),
    ("mm", "N64K64M64", {"K": [1, 64, 1, 1], "X": [64, 1, 1, 1], "Y": [64, 1, 1, 1], "vec": 1}),
])
def test_one_element_shared_tiles_build(op, spec, change):
    """A block whose shared tile of an operand is one element (a compile error seen on an H100: the copy
    had no loop left to spread over the threads) builds and keeps its estimated shared memory."""
    wl = parse(op, spec)
    template = templates.load(wl)
    params = {**template.default_params(wl, True), **change}
    check.check(wl, template, params, GPU)
    source = build.build(wl, template, params, GPU).mod.imports[0].inspect_source()
    assert declared_shared_bytes(source) == template.resources(wl, params)["shared_bytes"], params


@pytest.mark.parametrize("template,options,status,reason", [
    ("Hang", {"run_timeout_s": 4}, "timeout", "kernel run exceeded 4 s"),
    ("SlowBuild", {"build_timeout_s": 4}, "timeout", "build exceeded 4 s"),
    ("Crash", {}, "runtime_error", "killed by SIGABRT"),
    ("IllegalAddress", {}, "runtime_error", "killed by SIGSEGV"),
    ("CompileError", {}, "compile_error", "InternalError"),
    ("ScheduleError", {}, "compile_error", "not a data parallel block iter"),
    ("Wrong", {}, "wrong_result", "differ from the float64 reference"),
])
def test_failures_get_their_status(template, options, status, reason):
    opts = dataclasses.replace(FAST, template=f"faulty_templates:{template}", **options)
    r = measure(parse("mm", "N16K16M16"), None, opts)
    assert r.status == status
    assert reason in r.reason
    assert r.report(7)["default"] == 0.0 and r.report(7)["parameter_id"] == 7


def test_missing_target_is_reported():
    r = measure(parse("mm", "N16K16M16"), None, Options(target="rocm"))
    assert r.status == "invalid" and "no ROCM device" in r.reason


def test_bad_knobs_are_rejected_without_a_measuring_process():
    """Once a child has described the device, the parent checks knobs itself: no process, no TVM import."""
    wl = parse("mm", "N64K64M64")
    assert measure(wl, None, FAST).status == "ok"  # a child ran and described the CPU
    r = measure(wl, {"K": [1, 1, 1, 1]}, FAST)
    assert r.status == "invalid" and "K: factors [1, 1, 1, 1] multiply to 1, expected 64" in r.reason
    assert "stages" not in r.extra and r.target.startswith("llvm") and r.device


@pytest.mark.parametrize("op,spec,extra", [("mm", "N128K128M128_f16", {}),
                                           ("conv", "N2C64HW8F64K3ST1PD1_f16", {"width": 8})])
def test_knobs_of_a_hopper_only_kernel_are_invalid_on_the_cpu(op, spec, extra):
    """The wgmma kernel has no CPU schedule: its knobs on the CPU are refused with the reason, before any build."""
    knobs = {"rows": 64, "cols": 64, "stages": 4, "in_flight": 1, "producer": 0, "cluster": 1, "split": 1,
             "slices": 1, "epilogue": 1, **extra}
    r = measure(parse(op, spec), knobs, FAST)
    assert r.status == "invalid" and r.build_s is None
    assert "these instructions exist on CUDA sm_90 GPUs only, not on cpu" in r.reason and "no CPU kernel" in r.reason


def test_device_limits_from_the_cache_reject_gpu_knobs(private_service):
    from trial import target

    target.save("cuda", GPU)
    assert target.load("cuda") == GPU
    wl = parse("mm", "N2048K64M2048")
    params = {**templates.load(wl).default_params(wl, True), "X": [1, 1, 64, 32], "Y": [1, 1, 32, 64]}
    r = measure(wl, params, Options(target="cuda"))
    assert r.status == "invalid" and "2048 threads per block > device limit 1024" in r.reason
    assert r.device == "test GPU" and "stages" not in r.extra
    # knobs within the cached limits go to a child, which finds no CUDA device on this machine
    r = measure(wl, templates.load(wl).default_params(wl, True), Options(target="cuda"))
    assert r.status == "invalid" and "no CUDA device" in r.reason and "stages" in r.extra


def test_gpu_kernels_compile_in_their_targets_scope(monkeypatch):
    """TVM's CUDA compile callback takes the arch from the current target and otherwise asks GPU 0, which opens a
    context and fails in a build worker, which sees no GPU: every GPU build runs in its target's scope."""
    scopes, compile_ = [], tvm.compile
    monkeypatch.setattr(tvm, "compile", lambda *args, **kw: (scopes.append(tvm.target.Target.current(allow_none=True)),
                                                             compile_(*args, **kw))[1])
    sm_90 = target_of("sm_90")
    for name in ("mm/N512K1024M1024", "mm/N512K1024M1024_f16", "bmm/B960N128K64M128PNT_f16", "bmm/B960N128K64M128_i8"):
        wl = parse(*name.split("/"))
        template = templates.load(wl, target=sm_90)
        build.build(wl, template, template.default_params(wl, True), sm_90)
    assert [str(scope.attrs["arch"]) for scope in scopes] == ["sm_90", "sm_90a", "sm_90a", "sm_90"]

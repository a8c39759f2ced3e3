"""The Hopper warpgroup-MMA template beyond the 16-bit types: int8, float8 e4m3 and TF32 matmuls with both
operands K-major (PNT, B column-major as cuBLASLt's fast int8 and float8 paths and torch.nn.Linear's weight
take it) get it on sm_90, with 128-byte K tiles (128 elements of 8 bits, 32 of TF32) and m64nNk32 or m64nNk8
wgmmas; their kernels compile as a GPU machine compiles them (NVRTC, then ptxas for sm_90a) without local
memory, int8's uint32 accumulators stored as the int32 sums they hold; and the suite's tuners propose only
configs the device runs.  (wgmma results are verified on GPUs only; the CPU verifies these types on the
portable templates: tests/test_tensorcore.py, and TF32 below.)"""
import re

import numpy as np
import pytest
from tuner_harness import FakeNNI, make_tuner, no_checkpoint_dir  # noqa: F401

from benchmarks.proposals import stand_in
from searchspace import SearchSpace
from trial import build, check, templates
from trial.archs import target_of
from trial.constraints import KernelRules
from trial.measure import Options, measure
from trial.templates import matmul, tensorcore, wgmma
from trial.verify import keep_bits, make_inputs
from trial.workload import parse_name
from tuners.gbfs import GBFSTuner
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner

from cuda_kernels import valid_configs
from nvrtc import compile_kernels, cuda_toolkit  # noqa: F401

SM90, SM80 = target_of("sm_90"), target_of("sm_80")
WGMMA = {"i8": "wgmma_int_ss_mma_async_sync_aligned_m64n{}k32_s32_s8_s8(",
         "e4m3": "wgmma_fp8_ss_mma_async_sync_aligned_m64n{}k32_f32_e4m3_e4m3_1_1(",
         "tf32": "wgmma_tf32_ss_mma_async_sync_aligned_m64n{}k8_f32_tf32_tf32_1_1("}
FAST = Options(target="llvm", min_repeat_ms=1)


@pytest.mark.parametrize("suffix", ["i8", "e4m3"])
def test_8_bit_mm_with_k_major_operands_gets_the_wgmma_template_on_hopper(suffix):
    wl = parse_name(f"mm/N512K1024M1024PNT_{suffix}")
    assert templates.load(wl, target=SM90) is wgmma and templates.load(wl, target=SM80) is tensorcore
    assert templates.candidates(wl) == [wgmma, tensorcore]
    assert templates.load(wl, params=wgmma.default_params(wl, True)) is wgmma
    untransposed_b = parse_name(f"mm/N512K1024M1024_{suffix}")  # B row-major: MN-major, which 8-bit wgmma cannot read
    assert templates.load(untransposed_b, target=SM90) is tensorcore
    assert wgmma not in templates.candidates(untransposed_b)
    assert templates.load(parse_name(f"mm/N512K1056M1024PNT_{suffix}"), target=SM90) is tensorcore  # K not in 128s


def test_int8_tiles_are_128_deep_and_at_most_224_wide():
    wl = parse_name("mm/N512K1024M1792PNT_i8")
    with pytest.raises(check.InvalidConfig, match="cols 256 > 224, the widest int8 wgmma"):
        check.check(wl, wgmma, {**wgmma.default_params(wl, True), "cols": 256}, SM90)
    float8 = parse_name("mm/N512K1024M1792PNT_e4m3")  # the float types' wgmma takes 256 columns
    check.check(float8, wgmma, {**wgmma.default_params(float8, True), "cols": 256}, SM90)
    three_tiles = parse_name("mm/N128K384M128PNT_i8")
    with pytest.raises(check.InvalidConfig, match="split 2 does not divide K's 3 tiles of 128"):
        check.check(three_tiles, wgmma, {**wgmma.default_params(three_tiles, True), "split": 2}, SM90)
    # a stage holds 128 bytes of K per row in every type: the same shared memory as float16's 64-deep tiles
    f16 = parse_name("mm/N512K1024M1792PNT_f16")
    config = {**wgmma.default_params(wl, True), "stages": 5, "epilogue": 0}
    assert wgmma.resources(wl, config)["shared_bytes"] == wgmma.resources(f16, config)["shared_bytes"]
    # int32 out, staged after a 16-byte placeholder of the partial tile: rows of 128 + 8 sums (the padding that keeps
    # a half-warp's pairs of sums in distinct banks)
    staged = {**config, "stages": 2, "epilogue": 1}
    assert wgmma.resources(wl, staged)["shared_bytes"] == 2 * 1024 + 16 + 128 * (128 + 8) * 4


def test_tf32_is_float32_in_memory_and_its_kernel_is_hopper_wgmma_or_float32_on_the_cuda_cores():
    """TF32 (PyTorch's allow_tf32 matmul): float32 buffers, the wgmma kernel on sm_90, and where no TF32 kernel
    of the suite runs (other GPUs, the CPU), the float32 template; its inputs hold what TF32 keeps, so that
    the tensor core's products are the reference's, and the float32 template on the CPU passes the check."""
    wl = parse_name("mm/N64K64M128PNT_tf32")
    assert (wl.element.tvm, wl.out_dtype, wl.element.numpy) == ("float32", "float32", np.float32)
    assert templates.load(wl, target=SM90) is wgmma
    assert templates.load(wl, target=SM80) is matmul and templates.load(wl) is matmul
    assert templates.candidates(wl) == [wgmma, matmul]
    a, b = make_inputs(wl)
    assert a.dtype == np.float32 and not (a.view(np.uint32) & 0x1FFF).any() and not (b.view(np.uint32) & 0x1FFF).any()
    r = measure(wl, None, FAST)
    assert r.status == "ok" and r.gflops > 0, r.reason


def test_keeping_10_significand_bits_rounds_to_nearest_and_ties_to_even():
    one_ulp = 2.0**-10  # TF32's unit in the last place at 1
    x = np.array([1 + one_ulp / 2, 1 + 1.5 * one_ulp, 1 + one_ulp / 4, 1 + 0.75 * one_ulp, -(1 + one_ulp / 2)],
                 np.float32)
    assert keep_bits(x, 10).tolist() == [1.0, 1 + 2 * one_ulp, 1.0, 1 + one_ulp, -1.0]


@pytest.mark.parametrize("suffix,out", [("i8", "int"), ("e4m3", "float"), ("tf32", "float")])
def test_wgmma_kernels_of_the_new_types_compile_for_sm_90a_without_local_memory(cuda_toolkit, suffix, out):
    """Sampled valid configs and the split and sliced kinds: each wgmma of the type and width, the TMA loading
    both operands, C written in its own type (int8: the uint32 sums reinterpreted, never converted)."""
    wl = parse_name(f"mm/N512K4096M1024PNT_{suffix}")
    split = {**wgmma.default_params(wl, True), "producer": 1, "split": 4, "epilogue": 0}
    sliced = {**wgmma.default_params(wl, True), "rows": 64, "producer": 1, "stages": 4, "slices": 2}
    for config in [*valid_configs(wl, SM90, 2, seed=3, template=wgmma), split, sliced]:
        check.check(wl, wgmma, config, SM90)
        source = build.build(wl, wgmma, config, SM90).mod.imports[0].inspect_source()
        kernel = source[source.index("__global__ void __launch_bounds__"):]
        assert WGMMA[suffix].format(config["cols"]) in kernel, config
        assert f"main_kernel({out}* __restrict__ C_ptr" in kernel and "cp_async_bulk_tensor" in kernel, config
        assert not re.findall(r"\(int\)\(\(uint|\(int\)acc", kernel), config  # no numeric conversion of the sums
        if config["split"] > 1:
            assert f"shared__cluster_v4_{'u32' if suffix == 'i8' else 'f32'}(" in source, config
        reports = compile_kernels(source, "sm_90a")
        assert reports and all(k.stack_bytes == 0 for k in reports), config


@pytest.mark.parametrize("cls", [OpEvoTuner, GBFSTuner, NA2CTuner], ids=lambda c: c.__name__)
@pytest.mark.parametrize("suffix", ["i8", "e4m3", "tf32"])
def test_the_suite_tuners_propose_only_wgmma_kernels_of_the_new_types_the_device_runs(suffix, cls):
    wl_name = f"mm/N512K1024M4096PNT_{suffix}"
    wl = parse_name(wl_name)
    rules = KernelRules(wl, wgmma, SM90)
    valid = [c for c in SearchSpace.from_json(wgmma.search_space(wl)).values() if not rules.problems(c)]
    assert valid and all(c["cols"] <= (224 if suffix == "i8" else 256) for c in valid)
    assert any(c["cols"] == 256 for c in valid) == (suffix != "i8")
    evaluate = stand_in(wl, wgmma, SM90)
    tuner = make_tuner(cls, wgmma.search_space(wl), workload=wl_name, target="sm_90", seed=2)
    run = FakeNNI(tuner, lambda config: evaluate(config).report(), concurrency=4).run(24)
    assert len(run.proposed) == 24 and all(outcome is not None for outcome in run.outcomes)

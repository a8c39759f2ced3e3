"""Pointwise float32 convolutions on the Hopper float32 template (conv2d_simt.py): chosen for 1x1, stride-1,
unpadded NCHW convolutions on sm_90 only, their rules said in the convolution's sizes, their kernels reading the
weights as one A for every image and the data as a batched B, compiled as a GPU machine compiles them (NVRTC,
then ptxas), and every suite tuner proposing only configs the device runs.  (Their results are verified on GPUs
only, as the simt template's are: TMA and mbarriers have no CPU form.)"""
import pytest
from tuner_harness import FakeNNI, make_tuner, no_checkpoint_dir  # noqa: F401

from benchmarks.proposals import stand_in
from trial import build, check, templates
from trial.archs import target_of
from trial.templates import conv2d, conv2d_simt, simt_operand
from trial.workload import parse_name
from tuners.gbfs import GBFSTuner
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner

from cuda_kernels import valid_configs
from nvrtc import compile_kernels, cuda_toolkit, ptx  # noqa: F401

SM90, SM80 = target_of("sm_90"), target_of("sm_80")
EXPAND = "conv/N32C64HW56F256K1ST1PD0"  # ResNet-50's layer1 1x1 expand, batch 32


def test_pointwise_float32_convolutions_on_hopper_get_the_simt_template():
    for name in (EXPAND, "conv/N32C64HW56F64K1ST1PD0", "conv/N1C512HW8F2048K1ST1PD0"):
        assert templates.load(parse_name(name), target=SM90) is conv2d_simt, name
    for name in ("conv/N32C256HW56F512K1ST2PD0", "conv/N32C64HW56F64K3ST1PD1", "conv/N32C64HW56F64K1ST1PD1",
                 "conv/N1C512HW7F2048K1ST1PD0", "conv/N32C64HW56F96K1ST1PD0", "conv/N32C64HW56F256K1ST1PD0_f16"):
        assert templates.load(parse_name(name), target=SM90) is not conv2d_simt, name
    wl = parse_name(EXPAND)
    assert templates.load(wl, target=SM80) is conv2d and templates.load(wl) is conv2d
    assert templates.load(wl, target=SM90, params=conv2d.default_params(wl, True)) is conv2d
    assert templates.load(wl, params=conv2d_simt.default_params(wl, True)) is conv2d_simt


def test_the_matmul_of_a_pointwise_convolution_and_its_rules_in_the_convolutions_sizes():
    wl = parse_name(EXPAND)
    assert conv2d_simt.matmul_of(wl).key == "bmm/B32N256K64M3136PNN"
    assert simt_operand.gemm_of(wl) == simt_operand.Gemm(256, 64, 3136, 32, True, False, a_shared=True, swapped=True)
    check.check(wl, conv2d_simt, conv2d_simt.default_params(wl, True), SM90)
    wide = {**conv2d_simt.default_params(wl, True), "warps_c": 2}  # 128 pixels: not a whole number of 3136
    with pytest.raises(check.InvalidConfig, match=r"the tile's 128 columns do not divide M 3136 \(the matmul's N is "
                                                  r"F 256, its M H\*W 3136, its K C 64\)"):
        check.check(wl, conv2d_simt, wide, SM90)


def test_the_weights_are_one_a_for_every_image_and_the_data_a_batched_b(cuda_toolkit):
    """A's tensor map is rank 2 (the F x C weights, K-major), B's rank 3 (an image's C x H*W pixels, a box one
    image deep, images N C H*W floats apart); the kernel copies A with 2-D and B with 3-D TMA copies, makes the
    mm kernel's FMAs per K tile and compiles without a stack frame or spills."""
    wl = parse_name(EXPAND)
    assert simt_operand.tensor_map(True, 64, 256, 64, 8)[:6] == [64, 256, 256, 8, 64, 1]
    assert simt_operand.tensor_map(False, 64, 3136, 64, 8, batch=32)[:8] == [3136, 64, 32, 12544, 802816, 64, 8, 1]
    for config in valid_configs(wl, SM90, 3, seed=2, template=conv2d_simt):
        source = build.build(wl, conv2d_simt, config, SM90).mod.imports[0].inspect_source()
        copies = "cluster_async_bulk_tensor_{}d_shared__cluster_global_mbarrier__complete_tx__bytes(tvm"
        assert source.count(copies.format(2)) == source.count(copies.format(3)) > 0, config
        fmas = ptx(source, "sm_90").count("fma.rn.ftz.f32")
        assert fmas == config["tm"] * config["tn"] * config["bk"], config
        assert all(k.stack_bytes == 0 and k.spill_bytes == 0 for k in compile_kernels(source, "sm_90")), config


@pytest.mark.parametrize("cls", [OpEvoTuner, GBFSTuner, NA2CTuner], ids=lambda c: c.__name__)
def test_every_proposal_is_a_kernel_the_device_runs(cls):
    wl = parse_name(EXPAND)
    evaluate = stand_in(wl, conv2d_simt, SM90)
    tuner = make_tuner(cls, conv2d_simt.search_space(wl), workload=wl.key, target="sm_90", seed=1)
    run = FakeNNI(tuner, lambda config: evaluate(config).report(), concurrency=4).run(40)
    assert len(run.proposed) == 40 and all(outcome is not None for outcome in run.outcomes)

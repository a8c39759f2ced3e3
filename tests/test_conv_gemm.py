"""Pointwise NHWC convolutions in the tensor-core types on Hopper: the wgmma matmul on the convolution's tensors
(trial/templates/conv2d_gemm.py), chosen for 1x1 stride-1 unpadded convolutions only, its kernel the matmul's,
compiled as a GPU machine compiles it (NVRTC, then ptxas for sm_90a).  Its results are verified on GPUs (the
GPU check's pointwise row): a CPU has no wgmma, and conv2d_nhwc.py serves the CPU."""
import hashlib
import re

import pytest
from test_tuner_constraints import TUNERS
from tuner_harness import no_checkpoint_dir, refused_proposals  # noqa: F401

from trial import build, check, templates
from trial.archs import target_of
from trial.templates import conv2d_gemm, conv2d_nhwc, wgmma
from trial.workload import parse_name

from cuda_kernels import valid_configs
from nvrtc import compile_kernels, cuda_toolkit  # noqa: F401

SM90, SM80 = target_of("sm_90"), target_of("sm_80")
POINTWISE = "conv/N32C64HW56F256K1ST1PD0_f16"  # ResNet-50's layer1 1x1 expand, batch 32


def test_pointwise_convolutions_on_hopper_take_the_wgmma_matmul():
    wl = parse_name(POINTWISE)
    assert templates.load(wl, target=SM90) is conv2d_gemm
    assert templates.load(wl, target=SM80) is conv2d_nhwc and templates.load(wl) is conv2d_nhwc
    for other in ["conv/N32C64HW56F64K3ST1PD1_f16", "conv/N32C256HW56F512K1ST2PD0_f16",
                  "conv/N32C512HW7F2048K1ST1PD0_f16"]:  # 3x3; stride 2; 32 x 7 x 7 pixels, not in 64s
        assert templates.load(parse_name(other), target=SM90) is conv2d_nhwc, other
    assert templates.load(wl, params=conv2d_gemm.default_params(wl, True)) is conv2d_gemm
    assert conv2d_gemm.as_matmul(wl).key == "mm/N100352K64M256PNT_f16"


def test_wgmma_knobs_on_a_convolution_the_matmul_does_not_compute_are_invalid():
    wl = parse_name("conv/N32C64HW56F64K3ST1PD1_f16")
    with pytest.raises(check.InvalidConfig, match="computes 1x1 convolutions of stride 1 without padding, not a 3x3"):
        check.check(wl, conv2d_gemm, wgmma.default_params(conv2d_gemm.as_matmul(wl), True), SM90)


@pytest.mark.parametrize("name", [POINTWISE, "conv/N32C256HW28F128K1ST1PD0_bf16", "conv/N16C256HW14F1024K1ST1PD0_tf32"])
def test_the_kernel_is_the_matmuls_on_the_convolutions_tensors(cuda_toolkit, name):
    """Per config, the CUDA code of the matmul N*H*W x C x F (PNT) itself, the buffers the convolution's NHWC input,
    F x 1 x 1 x C weights and NHWC output; compiled for sm_90a without local memory."""
    wl = parse_name(name)
    mm = conv2d_gemm.as_matmul(wl)
    for config in valid_configs(wl, SM90, 2, seed=3, template=conv2d_gemm):
        signature = conv2d_gemm.schedule(wl, config, SM90)["main"].script().split("def main(")[1].split("\n")[0]
        shapes = [tuple(int(n) for n in s.split(", ")) for s in re.findall(r"T\.Buffer\(\(([\d, ]+)\)", signature)]
        assert shapes == [*wl.input_shapes, wl.output_shape]
        source = build.build(wl, conv2d_gemm, config, SM90).mod.imports[0].inspect_source()
        same = build.build(mm, wgmma, config, SM90).mod.imports[0].inspect_source()
        assert hashlib.md5(source.encode()).digest() == hashlib.md5(same.encode()).digest(), config
        assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a")), config


@pytest.mark.parametrize("cls", TUNERS, ids=lambda c: c.__name__)
def test_the_suites_tuners_propose_kernels_the_device_runs(cls):
    """Every suite tuner on the pointwise template's space proposes (almost) only configs the H100/H200 runs."""
    failed = refused_proposals(cls, POINTWISE, conv2d_gemm, "sm_90", 200, seed=4)
    assert failed <= 2, f"{failed} of 200 proposals broke the device's rules"

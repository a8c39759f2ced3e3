"""Convolutions in the tensor-core types (float16, bfloat16, TF32), NHWC: their specs, their reference, and
the direct NHWC template on the CPU and lowered to CUDA code (no GPU needed)."""
import random
import re

import numpy as np
import pytest
from test_trial import FAST, GPU
from test_tuner_constraints import TUNERS
from tuner_harness import no_checkpoint_dir, refused_proposals  # noqa: F401

from searchspace import SearchSpace
from trial import build, check, templates
from trial.templates import conv2d_nhwc
from trial.measure import measure
from trial.verify import Reference
from trial.workload import SpecError, parse, parse_name

SMALL = ["N2C8HW9F16K3ST1PD1_f16", "N1C16HW10F8K3ST2PD1_bf16", "N2C8HW7F8K1ST1PD0_f16", "N1C4HW8F4K3ST1PD0_tf32"]


def test_a_typed_convolution_is_nhwc_with_ohwi_weights():
    wl = parse("conv", "N32C64HW56F128K3ST2PD1_f16")
    assert (wl.layout, wl.dtype, wl.out_dtype) == ("NHWC", "float16", "float16")
    assert wl.input_shapes == ((32, 56, 56, 64), (128, 3, 3, 64)) and wl.output_shape == (32, 28, 28, 128)
    assert wl.key == "conv/N32C64HW56F128K3ST2PD1_f16" and parse("conv", "N32C64HW56F128K3ST2PD1").layout == "NCHW"
    assert parse_name("conv/N1C4HW8F4K3ST1PD0_tf32").out_dtype == "float32"


@pytest.mark.parametrize("spec,message", [
    ("N1C3HW224F64K7ST2PD3_f16", "C=3 is not a multiple of 8 (pad the channels"),
    ("N1C8HW8F6K3ST1PD1_bf16", "F=6 is not a multiple of 8"),
    ("N1C6HW8F8K3ST1PD1_tf32", "C=6 is not a multiple of 4"),
    ("N1C16HW8F16K3ST1PD1_i8", "convolutions take float32 (no suffix), _f16, _bf16 or _tf32, not _i8")])
def test_typed_convolutions_the_kernels_cannot_read_are_refused(spec, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        parse("conv", spec)


@pytest.mark.parametrize("spec", ["N2C8HW9F8K3ST2PD1_f16", "N1C4HW7F8K3ST1PD0_tf32"])
def test_the_nhwc_reference_agrees_with_a_direct_convolution(spec):
    """It finds the sums of windows of the NHWC input against the F x K x K x C weights, and a wrong one."""
    wl = parse("conv", spec)
    ref = Reference.of(wl, seed=3)
    data, weight = (x.astype(np.float64) for x in ref.inputs)
    d, out = wl.dims, wl.out_hw
    padded = np.pad(data, ((0, 0), (d["PD"], d["PD"]), (d["PD"], d["PD"]), (0, 0)))
    right = np.zeros(wl.output_shape)
    for y in range(out):
        for x in range(out):
            window = padded[:, y * d["ST"]:y * d["ST"] + d["K"], x * d["ST"]:x * d["ST"] + d["K"]]
            right[:, y, x] = np.einsum("nhwc,fhwc->nf", window, weight)
    assert ref.check(right.astype(np.float32)) is None
    right[0, 1, 2, 3] += 0.5
    assert "at (0, 1, 2, 3)" in ref.check(right.astype(np.float32))


@pytest.mark.parametrize("spec", SMALL)
def test_typed_convolutions_verify_on_the_cpu(spec):
    wl = parse("conv", spec)
    assert templates.load(wl).__name__ == "trial.templates.conv2d_nhwc"
    r = measure(wl, None, FAST)
    assert r.status == "ok", r.reason


def shared_bytes(source):
    """Bytes of the kernel's static shared arrays, by their element types."""
    size = {"half": 2, "nv_bfloat16": 2, "float": 4}
    return sum(size[t] * int(n) for t, n in re.findall(r"__shared__ (?:alignas\(\d+\) )?(\w+) \w+\[(\d+)\];", source))


@pytest.mark.parametrize("name", ["conv/N32C64HW56F64K3ST1PD1_f16", "conv/N32C256HW56F128K1ST2PD0_bf16"])
def test_the_gpu_schedule_lowers_to_cuda_with_the_estimated_shared_memory(name):
    """ResNet-50's 3x3 layer and a 1x1 stride-2 one: the default config and random valid ones pass TVM's
    lowering and CUDA code generation, sum in float32 and declare the shared memory `resources` says."""
    wl = parse_name(name)
    template = templates.load(wl)
    space, rng, built = SearchSpace.from_json(template.search_space(wl)), random.Random(5), []
    params = template.default_params(wl, True)
    while len(built) < 4:
        try:
            check.check(wl, template, params, GPU)
        except check.InvalidConfig:
            params = space.sample(rng)
            continue
        source = build.build(wl, template, params, GPU).mod.imports[0].inspect_source()
        assert "float conv_local" in source, params
        assert shared_bytes(source) == template.resources(wl, params)["shared_bytes"], params
        built.append(params)
        params = space.sample(rng)


@pytest.mark.parametrize("cls", TUNERS, ids=lambda c: c.__name__)
def test_the_suites_tuners_propose_kernels_the_device_runs(cls):
    """ResNet-50's 3x3 layer in float16 on an H100/H200: (almost) every proposal passes the knob check."""
    failed = refused_proposals(cls, "conv/N32C64HW56F64K3ST1PD1_f16", conv2d_nhwc, "sm_90", 200, seed=2)
    assert failed <= 2, f"{failed} of 200 proposals broke the device's rules"

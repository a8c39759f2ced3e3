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
from trial.templates.wgmma_rows import PixelRows
from trial.workload import parse_name

from cuda_kernels import valid_configs
from nvrtc import compile_kernels, cuda_toolkit  # noqa: F401

SM90, SM80 = target_of("sm_90"), target_of("sm_80")
POINTWISE = "conv/N32C64HW56F256K1ST1PD0_f16"  # ResNet-50's layer1 1x1 expand, batch 32


def test_convolutions_on_hopper_take_the_wgmma_kernel_as_a_matmul_or_an_implicit_gemm():
    wl = parse_name(POINTWISE)
    assert templates.load(wl, target=SM90) is conv2d_gemm
    assert templates.load(wl, target=SM80) is conv2d_nhwc and templates.load(wl) is conv2d_nhwc
    assert conv2d_gemm.is_matmul(wl) and conv2d_gemm.as_matmul(wl).key == "mm/N100352K64M256PNT_f16"
    assert "width" not in conv2d_gemm.search_space(wl)
    for implicit in ["conv/N32C64HW56F64K3ST1PD1_f16", "conv/N32C256HW56F512K1ST2PD0_f16",
                     "conv/N32C512HW7F2048K1ST1PD0_f16"]:  # 3x3; stride 2; 32 x 7 x 7 pixels, not in 64s
        other = parse_name(implicit)
        assert templates.load(other, target=SM90) is conv2d_gemm and not conv2d_gemm.is_matmul(other), implicit
        assert conv2d_gemm.search_space(other)["width"]["_value"] == conv2d_gemm.WIDTHS
    for direct in ["conv/N32C8HW56F64K3ST1PD1_f16", "conv/N32C64HW56F72K3ST1PD1_f16"]:  # channels, filters
        assert templates.load(parse_name(direct), target=SM90) is conv2d_nhwc, direct
    assert templates.load(wl, params=conv2d_gemm.default_params(wl, True)) is conv2d_gemm


def test_an_implicit_gemms_tiles_pair_up_in_clusters_and_fit_tmas_boxes():
    wl = parse_name("conv/N1C64HW24F64K3ST1PD1_f16")  # 24 x 24 outputs: 3 x 3 tiles of 8 x 8 pixels
    paired = {**conv2d_gemm.default_params(wl, True), "rows": 64, "width": 8, "producer": 1, "cluster": 2}
    with pytest.raises(check.InvalidConfig, match="9 pixel tiles do not pair up in clusters of 2"):
        check.check(wl, conv2d_gemm, paired, SM90)
    check.check(wl, conv2d_gemm, {**paired, "width": 16}, SM90)  # 2 x 6 tiles of 16 x 4
    wide = parse_name("conv/N1C64HW64F64K1ST8PD0_f16")  # stride 8: 64 pixels span 512 input columns
    with pytest.raises(check.InvalidConfig, match="a tile of 64 x 1 pixels at stride 8 spans more than the 256"):
        check.check(wide, conv2d_gemm, {**conv2d_gemm.default_params(wide, True), "rows": 64, "width": 64}, SM90)


@pytest.mark.parametrize("name,box,strides", [
    ("conv/N32C64HW56F64K3ST1PD1_f16", (64, 16, 8, 1), (1, 1, 1, 1)),
    ("conv/N32C128HW56F128K3ST2PD1_bf16", (64, 32, 16, 1), (1, 2, 2, 1)),
    ("conv/N8C64HW28F64K3ST1PD1_tf32", (32, 16, 8, 1), (1, 1, 1, 1))])
def test_an_implicit_gemm_reads_boxes_of_pixels_at_the_stride(name, box, strides):
    """The input's tensor map is of rank 4 (C, W, H, N), its box the K tile's channels by the tile's pixels, stride
    times as wide and high, traversed `ST` apart."""
    wl = parse_name(name)
    config = conv2d_gemm.default_params(wl, True)
    assert (config["rows"], config["width"]) == (128, 16)
    script = conv2d_gemm.schedule(wl, config, SM90)["main"].script()
    call = next(line for line in script.splitlines() if "cuTensorMapEncodeTiled" in line and "A.data" in line)
    numbers = [int(x) for x in call.split("A.data, ")[1].rstrip(")").split(", ")]
    d = wl.dims
    assert numbers[:4] == [d["C"], d["HW"], d["HW"], d["N"]]
    assert tuple(numbers[7:11]) == box and tuple(numbers[11:15]) == strides


@pytest.mark.parametrize("name", ["conv/N32C64HW56F64K3ST1PD1_f16", "conv/N32C128HW56F128K3ST2PD1_bf16",
                                  "conv/N32C512HW7F2048K1ST1PD0_f16", "conv/N8C64HW28F64K3ST1PD1_tf32"])
def test_implicit_gemms_compile_for_sm_90a(cuda_toolkit, name):
    """The hand-picked config and random valid ones compile without local memory, reading the input through a
    rank-4 tensor map."""
    wl = parse_name(name)
    for config in valid_configs(wl, SM90, 2, seed=6, template=conv2d_gemm):
        source = build.build(wl, conv2d_gemm, config, SM90).mod.imports[0].inspect_source()
        assert all(k.stack_bytes == 0 for k in compile_kernels(source, "sm_90a")), config
        assert "cp_async_bulk_tensor_4d" in source.replace(".", "_"), config


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


def test_rows_past_the_outputs_edge_are_not_stored():
    """A tile's row is stored only where it is an output pixel: no test where the tiles cover the output."""
    covered = PixelRows(parse_name("conv/N2C64HW16F64K3ST1PD1_f16"), 64, 8)  # 16 x 16: 2 x 2 tiles of 8 x 8
    assert covered.inside(3, 63) is True and covered.count == 2 * 2 * 2
    overhang = PixelRows(parse_name("conv/N2C64HW7F64K3ST1PD1_f16"), 64, 8)  # 7 x 7 in one tile of 8 x 8
    assert overhang.count == 2 and overhang.c_at(1, 63, 5) == (1, 7, 7, 5)
    assert overhang.inside(1, 63).value == 0 and overhang.inside(1, 54).value == 1  # pixels (7, 7) and (6, 6)

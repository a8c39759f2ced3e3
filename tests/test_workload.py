import re

import pytest

from trial.workload import SpecError, parse


@pytest.mark.parametrize("op,spec,dims,layout,flops", [
    ("mm", "N512K1024M1024", {"N": 512, "K": 1024, "M": 1024}, "NN", 2 * 512 * 1024 * 1024),
    ("mm", "N8K4M2PTN", {"N": 8, "K": 4, "M": 2}, "TN", 2 * 8 * 4 * 2),
    ("bmm", "B960N128K64M128PNT", {"B": 960, "N": 128, "K": 64, "M": 128}, "NT", 2 * 960 * 128 * 64 * 128),
    ("conv", "N512C3HW227F64K11ST4PD0", {"N": 512, "C": 3, "HW": 227, "F": 64, "K": 11, "ST": 4, "PD": 0},
     "NCHW", 2 * 512 * 64 * 55 * 55 * 3 * 121),
])
def test_parse(op, spec, dims, layout, flops):
    wl = parse(op, spec)
    assert wl.dims == dims and wl.layout == layout and wl.flops == flops
    assert parse(op, wl.spec) == wl
    assert parse(op, wl.key.split("/")[1]).key == wl.key


def test_shapes_follow_layout():
    wl = parse("bmm", "B2N3K4M5PTT")
    assert wl.input_shapes == ((2, 4, 3), (2, 5, 4)) and wl.output_shape == (2, 3, 5)
    conv = parse("conv", "N512C64HW27F192K5ST1PD2")
    assert conv.out_hw == 27 and conv.output_shape == (512, 192, 27, 27)


@pytest.mark.parametrize("op,spec,message", [
    ("mm", "N0K1M1", "N must be positive"),
    ("mm", "N512K1024", "expected the form"),
    ("mm", "N4K4M4PXN", "expected the form"),
    ("bmm", "B0N1K1M1", "B must be positive"),
    ("conv", "N1C3HW4F8K7ST1PD1", "output size would be <= 0"),
    ("conv", "N1C3HW4F8K3ST0PD1", "ST must be positive"),
    ("gemm", "N1K1M1", "unknown op 'gemm'"),
])
def test_bad_specs_say_what_is_wrong(op, spec, message):
    with pytest.raises(SpecError, match=message):
        parse(op, spec)


@pytest.mark.parametrize("op,spec,dtype,out,key", [
    ("mm", "N512K1024M1024_f16", "float16", "float16", "mm/N512K1024M1024PNN_f16"),
    ("bmm", "B960N128K64M128PNT_f16", "float16", "float16", "bmm/B960N128K64M128PNT_f16"),
    ("mm", "N512K1024M1024PNT_i8", "int8", "int32", "mm/N512K1024M1024PNT_i8"),
    ("mm", "N512K1024M1024_e4m3", "float8_e4m3fn", "float32", "mm/N512K1024M1024PNN_e4m3"),
    ("mm", "N512K1024M1024", "float32", "float32", "mm/N512K1024M1024PNN"),
    ("mm", "N512K1024M1024PNT_tf32", "tfloat32", "float32", "mm/N512K1024M1024PNT_tf32"),
    ("bmm", "B960N128K64M128PNT_tf32", "tfloat32", "float32", "bmm/B960N128K64M128PNT_tf32"),
])
def test_a_suffix_names_the_element_type(op, spec, dtype, out, key):
    wl = parse(op, spec)
    assert (wl.dtype, wl.out_dtype, wl.key) == (dtype, out, key)
    assert parse(op, key.split("/")[1]).key == key
    inputs = sum(a * b for a, b in (s[-2:] for s in wl.input_shapes)) * wl.dims.get("B", 1)
    out_bytes = {"float16": 2, "float32": 4, "int32": 4}[out]
    assert wl.buffer_bytes == inputs * wl.element.itemsize + out_bytes * wl.dims.get("B", 1) * wl.dims["N"] * wl.dims["M"]


@pytest.mark.parametrize("op,spec,message", [
    ("mm", "N512K1024M1024_tf16", "unknown element type _tf16; expected one of _f16, _bf16, _i8, _e4m3, _tf32"),
    ("mm", "N512K1024M1024_tf32", "tf32 kernels are mm or bmm with both operands K-major (PNT"),
    ("bmm", "B2N512K1024M1024PTN_tf32", "tf32 kernels are mm or bmm with both operands K-major (PNT"),
    ("bmm", "B2N512K1024M96PNT_tf32", "and K of 32: M=96 is not a multiple of 64"),
    ("mm", "N512K1024M1000PNT_tf32", "and K of 32: M=1000 is not a multiple of 64"),
    ("mm", "N500K1024M1024_f16", "N=500 is not a multiple of 16 (pad the operands)"),
    ("mm", "N512K48M1024_i8", "K=48 is not a multiple of 32"),
    ("mm", "N512K1024M1024PTN_i8", "read A untransposed (PNN or PNT), not PTN"),
    ("bmm", "B70000N16K16M16_f16", "70000 batches exceed the 65535 thread blocks"),
    ("conv", "N1C3HW8F4K3ST1PD1_f16", "channels in 16-byte vectors of 8: C=3 is not a multiple of 8, F=4"),
])
def test_tensor_core_specs_that_cannot_be_tiled_are_refused(op, spec, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        parse(op, spec)

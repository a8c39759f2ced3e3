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

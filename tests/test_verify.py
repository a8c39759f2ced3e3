"""The float64 reference itself: it agrees with a direct computation and reports a wrong element."""
import numpy as np
import pytest

from trial.verify import RTOL, Reference, int8_bound, make_inputs, tolerance_scale
from trial.workload import parse


def direct_conv(wl, data, weight):
    d = wl.dims
    pad, s, k, out = d["PD"], d["ST"], d["K"], wl.out_hw
    padded = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    result = np.zeros(wl.output_shape)
    for y in range(out):
        for x in range(out):
            window = padded[:, :, y * s:y * s + k, x * s:x * s + k]
            result[:, :, y, x] = np.einsum("nchw,fchw->nf", window, weight.astype(np.float64))
    return result


@pytest.mark.parametrize("spec", ["N2C3HW9F4K3ST2PD1", "N1C2HW7F3K5ST1PD2", "N2C3HW8F2K3ST1PD0"])
def test_conv_reference_agrees_with_a_direct_convolution(spec):
    wl = parse("conv", spec)
    ref = Reference.of(wl, seed=5)
    right = direct_conv(wl, *ref.inputs)
    assert ref.check(right.astype(np.float32)) is None
    wrong = right.copy()
    wrong[0, 1, 2, 2] += 0.5
    problem = ref.check(wrong.astype(np.float32))
    assert problem.startswith("1 of ") and "at (0, 1, 2, 2)" in problem


@pytest.mark.parametrize("spec", ["N16K8M12PNN", "N16K8M12PTT"])
def test_matmul_reference_agrees_and_catches_nan(spec):
    wl = parse("mm", spec)
    ref = Reference.of(wl)
    a, b = (x.astype(np.float64) for x in ref.inputs)
    right = (a.T if wl.layout[0] == "T" else a) @ (b.T if wl.layout[1] == "T" else b)
    assert ref.check(right.astype(np.float32)) is None
    right[3, 4] = np.nan
    assert "at (3, 4)" in ref.check(right.astype(np.float32))


def test_int8_inputs_cannot_overflow_and_are_checked_exactly():
    assert int8_bound(4096) == 127 and int8_bound(1 << 20) == 45 and 45**2 * (1 << 20) < 2**31
    wl = parse("mm", "N16K64M32PNT_i8")
    ref = Reference.of(wl)
    a, b = (x.astype(np.int64) for x in ref.inputs)
    right = a @ b.T
    assert tolerance_scale(wl) == 0 and ref.check(right.astype(np.int32)) is None
    right[2, 5] += 1
    assert "at (2, 5)" in ref.check(right.astype(np.int32))


def test_float8_inputs_keep_clear_of_zero_and_subnormals():
    x = make_inputs(parse("mm", "N64K64M64_e4m3"))[0].astype(np.float64)
    assert np.abs(x).min() >= 2.0**-6 and (x < 0).any() and (x > 0).any()


def test_tensor_core_tolerances_follow_the_accumulation():
    """float16: only the float32 accumulation (K * 2^-23); float8: plus one MMA's 13-bit sums."""
    assert tolerance_scale(parse("mm", "N16K1024M16_f16")) == 1024 * 2.0**-23
    assert tolerance_scale(parse("mm", "N16K1024M16_e4m3")) == 32 * 2.0**-13 + 1024 * 2.0**-23
    assert tolerance_scale(parse("mm", "N16K1024M16")) == RTOL


def test_float16_outputs_are_allowed_their_rounding_and_no_more():
    """float16 outputs hold the float32 sums rounded (half a unit in the last place, 2^-11 relative)."""
    ref = Reference.of(parse("mm", "N16K64M16_f16"))
    exact = np.zeros(ref.wl.output_shape)
    exact[ref.idx] = ref.expected
    assert ref.check(exact.astype(np.float16)) is None
    assert ref.check((exact * (1 + 2.0**-8)).astype(np.float16)) is not None

"""Winograd conv2d: the transforms' arithmetic, kernels verified on the CPU, the tolerance its rounding gets,
and the `algorithm` knob of the conv space."""
from __future__ import annotations

import random

import numpy as np
import pytest

from searchspace import ConstrainedSpace, SearchSpace
from trial import check, verify, winograd
from trial.archs import target_of
from trial.constraints import KernelRules
from trial.measure import Options, measure
from trial.templates import conv2d, conv2d_winograd
from trial.workload import parse

FAST = Options(target="llvm", min_repeat_ms=1)
SM90 = target_of("sm_90")


@pytest.mark.parametrize("m,r", [(2, 3), (4, 3), (6, 3), (2, 5), (3, 5), (4, 5)])
def test_transforms_compute_the_correlation(m, r):
    """A^T [(G g G^T) * (B^T d B)] A is the m x m valid correlation of an (m + r - 1)-square window."""
    a_t, b_t, g = winograd.matrices(m, r)
    rng = np.random.default_rng(m * r)
    d, w = rng.standard_normal((m + r - 1, m + r - 1)), rng.standard_normal((r, r))
    got = a_t @ ((g @ w @ g.T) * (b_t @ d @ b_t.T)) @ a_t.T
    expected = [[(d[i:i + r, j:j + r] * w).sum() for j in range(m)] for i in range(m)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * np.abs(d).sum() * np.abs(w).sum())


def test_too_many_points_are_refused():
    with pytest.raises(ValueError, match="F\\(6, 5\\) needs 9 finite points; 7 are defined"):
        winograd.matrices(6, 5)


@pytest.mark.parametrize("spec", ["N2C8HW9F16K3ST1PD1",   # 9x9 output: the last tile of a row cut at 1 column
                                  "N3C5HW11F7K5ST1PD2",   # primes: 7 filters, 5 channels; 27 tiles padded to 32
                                  "N1C4HW7F8K5ST1PD0",    # a 3x3 output inside one tile
                                  "N2C3HW10F5K3ST1PD0"])  # no padding
def test_winograd_kernels_verify(spec):
    """Through the measure path (its verification with Winograd's tolerance), the hand-picked config and two
    drawn from the Winograd half of the space."""
    wl = parse("conv", spec)
    space = SearchSpace.from_json(conv2d.search_space(wl))
    rng = random.Random(3)
    drawn = [{**space.sample(rng), "algorithm": "winograd"} for _ in range(2)]
    for params in [{**conv2d.default_params(wl, False), "algorithm": "winograd"}, *drawn]:
        r = measure(wl, params, FAST)
        assert r.status == "ok", (params, r.reason)


def numpy_winograd(wl, inputs, a_t, b_t, g):
    """The convolution by Winograd's transforms in float64, with the given matrices (tiles as the template)."""
    data, weight = (x.astype(np.float64) for x in inputs)
    d, m, alpha = wl.dims, a_t.shape[0], b_t.shape[0]
    side = -(-wl.out_hw // m)
    rows = side * m + alpha - m
    padded = np.zeros((d["N"], d["C"], rows, rows))
    padded[:, :, d["PD"]:d["PD"] + d["HW"], d["PD"]:d["PD"] + d["HW"]] = data
    U = np.einsum("ei,fcij,hj->fceh", g, weight, g)
    out = np.zeros((d["N"], d["F"], side * m, side * m))
    for ty in range(side):
        for tx in range(side):
            window = padded[:, :, ty * m:ty * m + alpha, tx * m:tx * m + alpha]
            V = np.einsum("ea,ncab,hb->nceh", b_t, window, b_t)
            out[:, :, ty * m:(ty + 1) * m, tx * m:(tx + 1) * m] = np.einsum(
                "ie,nfeh,jh->nfij", a_t, np.einsum("fceh,nceh->nfeh", U, V), a_t)
    return out[:, :, :wl.out_hw, :wl.out_hw]


def test_tolerance_is_derived_from_the_transforms_and_catches_a_wrong_one():
    """A float32 computation stays inside the bound (the CPU kernels' errors measured at 1e-4 to 3e-3 of it);
    an exact computation with one transform entry off by 5 % (a wrong constant) does not.  The bound is the
    worst case of the rounding, so an entry off by 1 % reads at 0.6 to 1.7 of it."""
    wl = parse("conv", "N2C16HW12F8K5ST1PD2")
    ref = verify.Reference.of(wl, seed=4)
    tolerance = ref.tolerance_of("winograd")
    assert np.all(tolerance > ref.tolerance_of("direct"))
    a_t, b_t, g = winograd.matrices(winograd.TILE[5], 5)
    exact = numpy_winograd(wl, ref.inputs, a_t, b_t, g)
    assert ref.check(exact, "winograd") is None
    rounded = numpy_winograd(wl, [x.astype(np.float32) for x in ref.inputs],
                             *(x.astype(np.float32) for x in (a_t, b_t, g)))
    assert ref.check(rounded, "winograd") is None
    b_wrong = b_t.copy()
    b_wrong[1, 2] *= 1.05
    assert "differ from the float64 reference" in ref.check(numpy_winograd(wl, ref.inputs, a_t, b_wrong, g), "winograd")
    with pytest.raises(ValueError, match="unknown algorithm 'fft'"):
        ref.tolerance_of("fft")


@pytest.mark.parametrize("spec,offered", [("N512C64HW27F192K5ST1PD2", True), ("N1C3HW32F8K3ST1PD1", True),
                                          ("N512C3HW227F64K11ST4PD0", False), ("N1C8HW16F8K3ST2PD1", False),
                                          ("N1C8HW16F8K7ST1PD3", False), ("N1C8HW16F8K1ST1PD0", False)])
def test_the_algorithm_knob_is_offered_where_winograd_applies(spec, offered):
    wl = parse("conv", spec)
    space = SearchSpace.from_json(conv2d.search_space(wl))
    assert ("algorithm" in space.names) == offered == conv2d_winograd.applies(wl)
    if offered:
        assert {space.conditions[n].values for n in space.names if n != "algorithm"} == {("direct",), ("winograd",)}
        assert [n for n in space.names if space.conditions.get(n) and space.conditions[n].values == ("winograd",)] == \
            list(conv2d_winograd.search_space(wl))


def test_hand_picked_configs_keep_the_rules_of_both_devices():
    wl = parse("conv", "N512C64HW27F192K5ST1PD2")
    gpu = conv2d.default_params(wl, True)
    assert gpu["algorithm"] == "winograd"
    check.check(wl, conv2d, gpu, SM90)
    check.check(wl, conv2d, {**gpu, "algorithm": "direct"}, SM90)
    assert conv2d.default_params(wl, False)["algorithm"] == "direct"


def test_each_algorithm_is_judged_by_its_own_knobs():
    """A Winograd config with the direct knobs of a block the GPU cannot launch is valid, and the other way
    round; the knob check names the product's rule it breaks (its channel tile of 2 for vectors of 4)."""
    wl = parse("conv", "N512C64HW27F192K5ST1PD2")
    p = conv2d.default_params(wl, True)
    too_many_threads = {**p, "tile_f": [1, 1, 192, 1], "tile_y": [1, 1, 27, 1]}
    check.check(wl, conv2d, too_many_threads, SM90)
    with pytest.raises(check.InvalidConfig, match="46656 threads per block > device limit 1024"):
        check.check(wl, conv2d, {**too_many_threads, "algorithm": "direct"}, SM90)
    with pytest.raises(check.InvalidConfig, match="vec 4 does not divide A's contiguous tile extent 2"):
        check.check(wl, conv2d, {**p, "wino_c": [32, 1, 2]}, SM90)
    check.check(wl, conv2d, {**p, "wino_c": [32, 1, 2], "algorithm": "direct"}, SM90)


def test_domains_are_pruned_by_each_familys_own_rules():
    """The knob values no valid config takes are left out per family, by that family's rules only: the direct
    kernel gives filters threadIdx.z (at most 64), the product's registers count both operands' fragments."""
    wl = parse("conv", "N512C64HW27F192K5ST1PD2")
    space = ConstrainedSpace.of(SearchSpace.from_json(conv2d.search_space(wl)), KernelRules(wl, conv2d, SM90))
    domains = space.domains()
    assert [1, 1, 96, 2] not in domains["tile_f"] and [1, 1, 96, 2] in domains["wino_f"]
    assert [1, 1, 1, 192] in domains["tile_f"] and [1, 1, 1, 192] not in domains["wino_f"]  # 208 vs 401 registers
    rng = random.Random(0)
    samples = [space.sample(rng) for _ in range(30)]
    assert {c["algorithm"] for c in samples} == {"direct", "winograd"}
    assert all(space.valid(c) for c in samples)

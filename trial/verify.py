"""Independent check of a kernel's output: a float64 numpy reference on a seeded sample of outputs.

The reference shares nothing with the templates (no TVM): it indexes the stored inputs directly,
so a schedule that reads the wrong tile, drops a reduction step or races is caught.  Inputs are
drawn in float32 and rounded to the workload's type (TF32: to its 10 stored significand bits, kept in
float32), and the reference multiplies those rounded values, so the only errors left to tolerate are
the kernel's accumulation (`tolerance_scale`), the rounding of its sum to a narrower output type
(float16: half a unit in the last place) and, for a kernel that computes by transforms (Winograd),
their rounding (`Reference.tolerance_of`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from . import winograd
from .workload import Workload

FULL_CHECK_LIMIT = 1 << 16  # outputs up to this size are checked in full
SAMPLES = 4096
RTOL = 1e-4  # relative to sum |a * b| over the reduction: float32 accumulation stays far below
INT32_MAX = 2**31 - 1
ALGORITHMS = ("direct", "winograd")
"""How a kernel may compute its result; each rounds differently (`Reference.tolerance_of`)."""
BOUND_CHUNK = 256  # sampled outputs whose Winograd windows are gathered at a time
SMALLEST_E4M3 = 2.0**-6
"""Inputs in float8 e4m3 keep clear of zero and subnormals, which TVM 0.27's CPU code decodes wrongly
(zero reads as 2^-9): the CPU kernels that CI verifies then see the values the reference sees."""


def int8_bound(reduction: int) -> int:
    """The largest |x| <= 127 for int8 inputs such that no sum of `reduction` products overflows int32."""
    return max(1, min(127, math.isqrt(INT32_MAX // reduction)))


def keep_bits(x: np.ndarray, bits: int) -> np.ndarray:
    """float32 `x` rounded to `bits` stored significand bits (to nearest, ties to even), still float32."""
    drop = np.uint32(23 - bits)
    u = x.view(np.uint32)
    half = ((u >> drop) & np.uint32(1)) + (np.uint32(1) << (drop - np.uint32(1))) - np.uint32(1)
    return ((u + half) & ~((np.uint32(1) << drop) - np.uint32(1))).view(np.float32)


def _draw(wl: Workload, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    e = wl.element
    if e.is_integer:
        bound = int8_bound(wl.reduction)
        return rng.integers(-bound, bound + 1, shape, dtype=np.int32).astype(e.numpy)
    x = rng.random(shape, dtype=np.float32) * 2 - 1
    if e.name == "float8_e4m3fn":
        x = np.copysign(SMALLEST_E4M3 + np.abs(x) * (1 - SMALLEST_E4M3), x)
    if e.input_bits:  # TF32: values the tensor core reads whole, so that its products are the reference's
        x = keep_bits(x, e.input_bits)
    return x.astype(e.numpy, copy=False)


def make_inputs(wl: Workload, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [_draw(wl, shape, rng) for shape in wl.input_shapes]


def tolerance_scale(wl: Workload) -> float:
    """The error allowed per unit of sum |a * b| over an output's reduction.

    float32 on CUDA cores: RTOL, well above what rounded float32 accumulation reaches.  Tensor cores
    multiply the rounded inputs exactly; an MMA adds its `mma_k` products keeping at least `step_bits`
    bits (an error of at most mma_k * 2^-step_bits of their magnitudes, float8 on Hopper), and each
    later float32 addition may truncate (2^-23): K * 2^-23 over a reduction of K.  int32 sums are exact.
    """
    e = wl.element
    if e.is_integer:
        return 0.0
    if not e.mma_k:
        return RTOL
    return (e.mma_k * 2.0**-e.step_bits if e.step_bits else 0.0) + wl.reduction * 2.0**-23


def sample_indices(wl: Workload, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Output coordinates to check: all of them for small outputs, else a seeded sample plus corners."""
    shape = wl.output_shape
    size = int(np.prod(shape))
    if size <= FULL_CHECK_LIMIT:
        flat = np.arange(size)
    else:
        rng = np.random.default_rng(seed + 1)
        flat = np.unique(np.concatenate([rng.integers(0, size, SAMPLES), [0, size - 1]]))
    return np.unravel_index(flat, shape)


def _products(wl: Workload, inputs: list[np.ndarray], idx: tuple[np.ndarray, ...]) -> np.ndarray:
    """For each sampled output, the float64 terms of its reduction, shape (samples, reduction).

    Only the sampled rows, columns or windows are gathered and widened, not whole inputs.
    """
    a, b = inputs
    if wl.op == "conv":
        d = wl.dims
        n, f, y, x = (idx[0], idx[3], idx[1], idx[2]) if wl.layout == "NHWC" else idx
        pad, s, k, size = d["PD"], d["ST"], d["K"], d["HW"]
        r = np.arange(k)
        rows = (y * s)[:, None, None] + r[None, :, None] - pad     # (S, k, 1)
        cols = (x * s)[:, None, None] + r[None, None, :] - pad     # (S, 1, k)
        inside = (rows >= 0) & (rows < size) & (cols >= 0) & (cols < size)  # (S, k, k): not padding
        rows, cols = np.clip(rows, 0, size - 1), np.clip(cols, 0, size - 1)
        if wl.layout == "NHWC":  # windows (S, k, k, C) against weights F x k x k x C
            window = a[n[:, None, None], rows, cols].astype(np.float64)
            window = np.where(inside[..., None], window, 0)
        else:  # windows (S, C, k, k) against weights F x C x k x k
            window = a[n[:, None, None, None], np.arange(d["C"])[None, :, None, None], rows[:, None], cols[:, None]]
            window = np.where(inside[:, None], window, 0).astype(np.float64)
        return (window * b[f].astype(np.float64)).reshape(len(n), -1)
    if wl.op == "mm":
        idx = (np.zeros_like(idx[0]), *idx)
        a, b = a[None], b[None]
    batch, i, j = idx
    rows = a[batch, :, i] if wl.layout[0] == "T" else a[batch, i, :]
    cols = b[batch, j, :] if wl.layout[1] == "T" else b[batch, :, j]
    return rows.astype(np.float64) * cols.astype(np.float64)


def winograd_bound(wl: Workload, inputs: list[np.ndarray], idx: tuple[np.ndarray, ...]) -> np.ndarray:
    """For each sampled output of a stride-1 convolution, what a Winograd F(m, r) kernel's rounding scales
    with: sum over channels of |A^T| [(|G| |w| |G^T|) * (|B^T| |d| |B|)] |A| at the output's place in its
    tile (trial/winograd.py), every product of the transforms taken in magnitude.  Direct convolution's
    sum |a * b| is this with identity transforms."""
    data, weight = inputs
    d, r = wl.dims, wl.dims["K"]
    m = winograd.TILE[r]
    a_t, b_t, g = (np.abs(x) for x in winograd.matrices(m, r))
    alpha = m + r - 1
    filters = np.einsum("ei,fcij,hj->fceh", g, np.abs(weight).astype(np.float64), g)  # (F, C, a, a)
    n, f, y, x = idx
    out = np.empty(len(n))
    for part in np.array_split(np.arange(len(n)), max(1, len(n) // BOUND_CHUNK)):
        rows = (y[part] // m * m)[:, None] + np.arange(alpha) - d["PD"]  # (S, a) of the input
        cols = (x[part] // m * m)[:, None] + np.arange(alpha) - d["PD"]
        inside = ((rows >= 0) & (rows < d["HW"]))[:, :, None] & ((cols >= 0) & (cols < d["HW"]))[:, None, :]
        window = np.abs(data[n[part, None, None, None], np.arange(d["C"])[None, :, None, None],
                             np.clip(rows, 0, d["HW"] - 1)[:, None, :, None],
                             np.clip(cols, 0, d["HW"] - 1)[:, None, None, :]]).astype(np.float64)
        tiles = np.einsum("ea,scab,hb->sceh", b_t, window * inside[:, None], b_t)
        summed = np.einsum("sceh,sceh->seh", tiles, filters[f[part]])
        out[part] = np.einsum("se,seh,sh->s", a_t[y[part] % m], summed, a_t[x[part] % m])
    return out


@dataclass
class Reference:
    """Seeded inputs and the float64 reference of the sampled outputs, computed before a kernel runs.

    `tolerance` is a direct computation's; a kernel of another algorithm (`ALGORITHMS`) is checked against
    that algorithm's, derived from its arithmetic the first time one is checked."""

    wl: Workload
    inputs: list[np.ndarray]
    idx: tuple[np.ndarray, ...]
    expected: np.ndarray
    tolerance: np.ndarray
    _tolerances: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, wl: Workload, seed: int = 0) -> Reference:
        inputs, idx = make_inputs(wl, seed), sample_indices(wl, seed)
        terms = _products(wl, inputs, idx)
        expected = terms.sum(axis=1)
        accumulated = tolerance_scale(wl) * np.abs(terms).sum(axis=1)
        rounded = wl.element.out_roundoff * (np.abs(expected) + accumulated)  # the sum rounded to float16
        return cls(wl, inputs, idx, expected, accumulated + rounded + 1e-6)

    def tolerance_of(self, algorithm: str) -> np.ndarray:
        """The error allowed at each checked output for a kernel computing by `algorithm`.

        winograd (float32 transforms, trial/templates/conv2d_winograd.py): the rounding of every sum a
        result passes through (`winograd.transform_error_scale`) times `winograd_bound`."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
        if algorithm == "direct":
            return self.tolerance
        if algorithm not in self._tolerances:
            d = self.wl.dims
            scale = winograd.transform_error_scale(winograd.TILE[d["K"]], d["K"], d["C"])
            self._tolerances[algorithm] = scale * winograd_bound(self.wl, self.inputs, self.idx) + 1e-6
        return self._tolerances[algorithm]

    @functools.cached_property
    def flat_indices(self) -> np.ndarray:
        """The checked outputs' positions in the output laid out flat (C order), in `check_sampled`'s order."""
        return np.ravel_multi_index(self.idx, self.wl.output_shape).astype(np.int64)

    def check(self, output: np.ndarray, algorithm: str = "direct") -> str | None:
        """None if `output` matches the reference on the checked elements (within the tolerance of a kernel
        computing by `algorithm`), else what is wrong."""
        return self.check_sampled(output[self.idx], algorithm)

    def check_sampled(self, sampled: np.ndarray, algorithm: str = "direct") -> str | None:
        """`check` of the checked elements alone, gathered elsewhere (at `flat_indices`)."""
        got = np.asarray(sampled).astype(np.float64)
        bad = ~(np.abs(got - self.expected) <= self.tolerance_of(algorithm))  # NaN counts as bad
        if not bad.any():
            return None
        first = int(np.argmax(bad))
        where = tuple(int(v[first]) for v in self.idx)
        return (f"{int(bad.sum())} of {bad.size} checked outputs differ from the float64 reference; "
                f"e.g. at {where}: got {got[first]:.6g}, expected {self.expected[first]:.6g}")

"""Independent check of a kernel's output: a float64 numpy reference on a seeded sample of outputs.

The reference shares nothing with the templates (no TVM): it indexes the stored inputs directly,
so a schedule that reads the wrong tile, drops a reduction step or races is caught.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .workload import Workload

FULL_CHECK_LIMIT = 1 << 16  # outputs up to this size are checked in full
SAMPLES = 4096
RTOL = 1e-4  # relative to sum |a * b| over the reduction: float32 accumulation stays far below


def make_inputs(wl: Workload, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.random(shape, dtype=np.float32) * 2 - 1).astype(wl.dtype, copy=False) for shape in wl.input_shapes]


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
        n, f, y, x = idx
        pad, s, k, size = d["PD"], d["ST"], d["K"], d["HW"]
        r = np.arange(k)
        rows = (y * s)[:, None, None] + r[None, :, None] - pad     # (S, k, 1)
        cols = (x * s)[:, None, None] + r[None, None, :] - pad     # (S, 1, k)
        inside = (rows >= 0) & (rows < size) & (cols >= 0) & (cols < size)  # (S, k, k): not padding
        window = a[n[:, None, None, None], np.arange(d["C"])[None, :, None, None],
                   np.clip(rows, 0, size - 1)[:, None], np.clip(cols, 0, size - 1)[:, None]]  # (S, C, k, k)
        window = np.where(inside[:, None], window, 0).astype(np.float64)
        return (window * b[f].astype(np.float64)).reshape(len(n), -1)
    if wl.op == "mm":
        idx = (np.zeros_like(idx[0]), *idx)
        a, b = a[None], b[None]
    batch, i, j = idx
    rows = a[batch, :, i] if wl.layout[0] == "T" else a[batch, i, :]
    cols = b[batch, j, :] if wl.layout[1] == "T" else b[batch, :, j]
    return rows.astype(np.float64) * cols.astype(np.float64)


@dataclass
class Reference:
    """Seeded inputs and the float64 reference of the sampled outputs, computed before a kernel runs."""

    wl: Workload
    inputs: list[np.ndarray]
    idx: tuple[np.ndarray, ...]
    expected: np.ndarray
    tolerance: np.ndarray

    @classmethod
    def of(cls, wl: Workload, seed: int = 0) -> Reference:
        inputs, idx = make_inputs(wl, seed), sample_indices(wl, seed)
        terms = _products(wl, inputs, idx)
        return cls(wl, inputs, idx, terms.sum(axis=1), RTOL * np.abs(terms).sum(axis=1) + 1e-6)

    def check(self, output: np.ndarray) -> str | None:
        """None if `output` matches the reference on the checked elements, else what is wrong."""
        got = output[self.idx].astype(np.float64)
        bad = ~(np.abs(got - self.expected) <= self.tolerance)  # NaN counts as bad
        if not bad.any():
            return None
        first = int(np.argmax(bad))
        where = tuple(int(v[first]) for v in self.idx)
        return (f"{int(bad.sum())} of {bad.size} checked outputs differ from the float64 reference; "
                f"e.g. at {where}: got {got[first]:.6g}, expected {self.expected[first]:.6g}")

"""Independent check of a kernel's output: a float64 numpy reference on a seeded sample of outputs.

The reference shares nothing with the templates (no TVM): it indexes the stored inputs directly,
so a schedule that reads the wrong tile, drops a reduction step or races is caught.
"""
from __future__ import annotations

import numpy as np

from .workload import Workload

FULL_CHECK_LIMIT = 1 << 16  # outputs up to this size are checked in full
SAMPLES = 4096
RTOL = 1e-4  # relative to sum |a * b| over the reduction: float32 accumulation stays far below


def make_inputs(wl: Workload, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=shape).astype(wl.dtype) for shape in wl.input_shapes]


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
    """For each sampled output, the float64 terms of its reduction, shape (samples, reduction)."""
    a, b = (x.astype(np.float64) for x in inputs)
    if wl.op == "conv":
        d = wl.dims
        n, f, y, x = idx
        pad, s, k = d["PD"], d["ST"], d["K"]
        a = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        r = np.arange(k)
        rows = (y * s)[:, None, None] + r[None, :, None]          # (S, k, 1)
        cols = (x * s)[:, None, None] + r[None, None, :]          # (S, 1, k)
        window = a[n[:, None, None, None], np.arange(d["C"])[None, :, None, None],
                   rows[:, None], cols[:, None]]                    # (S, C, k, k)
        return (window * b[f]).reshape(len(n), -1)
    if wl.op == "mm":
        idx = (np.zeros_like(idx[0]), *idx)
        a, b = a[None], b[None]
    batch, i, j = idx
    rows = a[batch, :, i] if wl.layout[0] == "T" else a[batch, i, :]
    cols = b[batch, j, :] if wl.layout[1] == "T" else b[batch, :, j]
    return rows * cols


def check(wl: Workload, inputs: list[np.ndarray], output: np.ndarray, seed: int = 0) -> str | None:
    """None if `output` matches the reference on the checked elements, else what is wrong."""
    idx = sample_indices(wl, seed)
    terms = _products(wl, inputs, idx)
    expected = terms.sum(axis=1)
    tolerance = RTOL * np.abs(terms).sum(axis=1) + 1e-6
    got = output[idx].astype(np.float64)
    bad = ~(np.abs(got - expected) <= tolerance)  # NaN counts as bad
    if not bad.any():
        return None
    first = int(np.argmax(bad))
    where = tuple(int(v[first]) for v in idx)
    return (f"{int(bad.sum())} of {bad.size} checked outputs differ from the float64 reference; "
            f"e.g. at {where}: got {got[first]:.6g}, expected {expected[first]:.6g}")

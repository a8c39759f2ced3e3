"""Winograd's minimal filtering F(m x m, r x r): the transforms of a stride-1 convolution's tiles.

An m x m tile of the output is computed from the (m + r - 1)-square window of the input that covers it:
Y = A^T [(G g G^T) * (B^T d B)] A, with `*` elementwise, so a convolution becomes (m + r - 1)^2 batched
matrix products over the channels instead of m^2 r^2 products per output pair (Lavin & Gray,
arXiv 1509.09308).  The matrices come from Toom-Cook interpolation at the points below, those of
Barabasz et al. (arXiv 1803.10986) whose float32 error is smallest, computed here in exact fractions.
This module holds the arithmetic alone (numpy, no TVM): the template turns the matrices into constants of
its kernel, and the verification bounds the kernel's rounding error with them.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

POINTS = (Fraction(0), Fraction(-1), Fraction(1), Fraction(1, 2), Fraction(-2), Fraction(-1, 2), Fraction(2))
"""Finite interpolation points, taken in this order: F(m, r) uses the first m + r - 2, plus infinity."""
TILE = {3: 4, 5: 4}
"""The output tile m for each kernel size r where Winograd is offered: F(4x4, 3x3) and F(4x4, 5x5), 6x6
and 8x8 transforms."""


def _inverse(rows: list[list[Fraction]]) -> list[list[Fraction]]:
    """The exact inverse of a square matrix of fractions (Gauss-Jordan)."""
    n = len(rows)
    work = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(rows)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if work[r][col] != 0)
        work[col], work[pivot] = work[pivot], work[col]
        lead = work[col][col]
        work[col] = [v / lead for v in work[col]]
        for r in range(n):
            if r != col and work[r][col] != 0:
                factor = work[r][col]
                work[r] = [a - factor * b for a, b in zip(work[r], work[col])]
    return [row[n:] for row in work]


def _evaluation(points: tuple[Fraction, ...], terms: int) -> list[list[Fraction]]:
    """Rows [a^0, ..., a^(terms-1)] of a polynomial's values at `points`, and a last row for infinity
    (the leading coefficient)."""
    return [[a ** t for t in range(terms)] for a in points] + [[Fraction(int(t == terms - 1)) for t in range(terms)]]


def matrices(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A^T (m x a), B^T (a x a) and G (a x r) of F(m, r), a = m + r - 1, in float64.

    Correlation y_i = sum_k d[i + k] g[k] is y = A^T [(G g) * (B^T d)] (the transpose of Toom-Cook's
    linear convolution); each finite point's scale Prod(a_j - a_k) goes into B^T and its inverse into G,
    which leaves B^T with small integers."""
    alpha = m + r - 1
    if not 3 <= alpha <= len(POINTS) + 1:
        raise ValueError(f"F({m}, {r}) needs {alpha - 1} finite points; {len(POINTS)} are defined")
    points = POINTS[:alpha - 1]
    scale = [math.prod((a - b for b in points if b != a), start=Fraction(1)) for a in points] + [Fraction(1)]
    values = _evaluation(points, alpha)
    b_t = [[v * s for v in row] for row, s in zip(map(list, zip(*_inverse(values))), scale)]
    g = [[v / s for v in row] for row, s in zip(_evaluation(points, r), scale)]
    a_t = list(map(list, zip(*_evaluation(points, m))))
    return tuple(np.array(x, dtype=np.float64) for x in (a_t, b_t, g))


def transform_error_scale(m: int, r: int, channels: int) -> float:
    """Relative rounding error, per unit of the bound `verify` computes with |A^T|, |B^T|, |G|, of a kernel
    that transforms in float32: each output passes through sums of r (filter transform, twice), a (input
    transform, twice), `channels` (the batched product) and a (output transform, twice) terms, each term
    losing at most one float32 unit of roundoff (2^-23 with a margin of two for the order of the sums)."""
    alpha = m + r - 1
    return (2 * r + 4 * alpha + channels) * 2.0 ** -23

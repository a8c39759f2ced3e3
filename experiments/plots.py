"""The convergence figure: best GFLOPS so far against trials, per tuner over its seeds (a benchmark
comparison) or of one experiment (`make tune`'s summary).

Also the curve figures the tables use (`best_so_far`, `trials_to`).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np


def best_so_far(gflops: Sequence[float]) -> list[float]:
    """The running maximum: what a tuner has found after each trial (failed trials count as 0)."""
    return [float(v) for v in np.maximum.accumulate(np.asarray(gflops, dtype=float))] if len(gflops) else []


def trials_to(fraction: float, values: Sequence[float]) -> int | None:
    """The first trial (1-based) at which the best so far `values` reach `fraction` of the run's own best."""
    if not values or values[-1] <= 0:
        return None
    return next(i + 1 for i, v in enumerate(values) if v >= fraction * values[-1])


def spread(curves: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per trial, the 25th, 50th and 75th percentiles over runs; a run that ended early keeps its best."""
    length = max(len(c) for c in curves)
    padded = np.array([list(c) + [c[-1] if len(c) else 0.0] * (length - len(c)) for c in curves], dtype=float)
    return tuple(np.percentile(padded, q, axis=0) for q in (25, 50, 75))  # type: ignore[return-value]


def convergence(curves: Mapping[str, Sequence[Sequence[float]]], path: str | os.PathLike[str], title: str,
                vendor: tuple[str, float] | None = None,
                finals: Mapping[str, Sequence[float]] | None = None,
                references: Sequence[tuple[str, float]] = ()) -> None:
    """Write a PNG: per tuner the median best-so-far curve over its runs, shaded between the quartiles.

    `curves` maps a tuner to one best-so-far curve per run; `vendor` is (library, GFLOPS), drawn as a
    horizontal line; `finals` maps a tuner to figures re-timed after its search (drawn as stars at
    its last trial), for tuners whose curve comes from their own measurements; `references` are
    (label, GFLOPS) drawn as dotted horizontal lines (e.g. the hand-picked config).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
    for i, (tuner, runs) in enumerate(curves.items()):
        runs = [r for r in runs if len(r)]
        if not runs:
            continue
        color = f"C{i % 10}"
        low, median, high = spread(runs)
        x = np.arange(1, len(median) + 1)
        label = tuner if len(runs) == 1 else f"{tuner} (median of {len(runs)}, IQR shaded)"
        ax.plot(x, median, color=color, label=label, linewidth=1.6)
        if len(runs) > 1:
            ax.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
        for value in (finals or {}).get(tuner, []):
            ax.plot([len(median)], [value], marker="*", markersize=11, color=color, linestyle="none",
                    label=f"{tuner}: best re-timed by the suite")
    if vendor:
        ax.axhline(vendor[1], color="black", linestyle="--", linewidth=1.2, label=f"{vendor[0]} ({vendor[1]:.0f})")
    for j, (label, value) in enumerate(references):
        ax.axhline(value, color=f"C{(len(curves) + j) % 10}", linestyle=":", linewidth=1.4,
                   label=f"{label} ({value:.1f})")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOPS so far")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

"""The benchmark protocol's published results: its report as a generated section of a page, and its plots.

`publish` writes the report (header with command, device, versions and date; a table per set) between two
markers of the page (docs/results.md), so the measured sections around it stay as written, and the plots
beside the page (docs/protocol/): per set, each tuner's median ratio to the vendor per workload with its
95 % interval, and each workload's median best so far over seeds against trials and against seconds.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.plots import best_so_far, spread

from .stats import median_ci

BEGIN = "<!-- the benchmark protocol: written by `python -m benchmarks.protocol --publish`; do not edit by hand -->"
END = "<!-- end of the benchmark protocol -->"
COLUMNS = 4

Records = Mapping[str, Mapping[str, Sequence[dict[str, Any]]]]
"""Per set title, per workload, the records of its runs (any tuner, any seed)."""


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _by_tuner(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    tuners: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        tuners.setdefault(record["tuner"], []).append(record)
    return tuners


def ratio_plot(title: str, workloads: Mapping[str, Sequence[dict[str, Any]]], path: Path) -> bool:
    """Each tuner's median ratio to the vendor per workload, with its 95 % interval; False (no file) where no
    run has a vendor figure."""
    rows = [(wl, tuner, [r["ratio"] for r in runs if r.get("ratio") is not None])
            for wl, records in workloads.items() for tuner, runs in _by_tuner(records).items()]
    rows = [(wl, tuner, ratios) for wl, tuner, ratios in rows if ratios]
    if not rows:
        return False
    plt = _pyplot()
    names = list(dict.fromkeys(wl for wl, _, _ in rows))
    tuners = list(dict.fromkeys(tuner for _, tuner, _ in rows))
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(names) + 1.5), dpi=110)
    for wl, tuner, ratios in rows:
        median, low, high = median_ci(ratios)
        k = tuners.index(tuner)
        y = names.index(wl) + (k - (len(tuners) - 1) / 2) * 0.8 / max(len(tuners), 1)
        err = None if np.isnan(low) else [[median - low], [high - median]]
        ax.errorbar([median], [y], xerr=err, fmt="o", color=f"C{k % 10}", markersize=4, capsize=2,
                    label=tuner)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1.0, linestyle="--")
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("best re-timed / vendor (median over seeds, 95 % bootstrap interval)")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _curve(record: dict[str, Any], seconds: np.ndarray | None) -> list[float]:
    """A run's best GFLOPS so far, after each trial or (given `seconds`) at each of those times."""
    rows = record["curve"]
    best = best_so_far([row[3] if row[2] == "ok" else 0.0 for row in rows])
    if seconds is None:
        return best
    at = np.searchsorted(np.asarray([row[1] for row in rows], dtype=float), seconds, side="right")
    return [best[i - 1] if i else 0.0 for i in at]


def curves_plot(title: str, workloads: Mapping[str, Sequence[dict[str, Any]]], path: Path, by_seconds: bool) -> None:
    """Per workload, each tuner's median best so far over its seeds (quartiles shaded), against trials or seconds."""
    plt = _pyplot()
    rows = -(-len(workloads) // COLUMNS)
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(4 * COLUMNS, 2.6 * rows), dpi=100, squeeze=False)
    for ax, (wl, records) in zip(axes.flat, workloads.items()):
        runs = _by_tuner(records)
        end = max((row[1] for r in records for row in r["curve"]), default=0.0)
        grid = np.linspace(0.0, end, 200) if by_seconds else None
        for k, (tuner, mine) in enumerate(runs.items()):
            low, median, high = spread([_curve(r, grid) for r in mine])
            x = grid if by_seconds else np.arange(1, len(median) + 1)
            ax.plot(x, median, color=f"C{k % 10}", linewidth=1.2, label=tuner)
            ax.fill_between(x, low, high, color=f"C{k % 10}", alpha=0.2, linewidth=0)
        vendor = [r["vendor_gflops"] for r in records if r.get("vendor_gflops")]  # protocol_report.with_ratio
        if vendor:
            ax.axhline(float(np.median(vendor)), color="black", linestyle="--", linewidth=1.0, label="vendor")
        ax.set_title(wl, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(workloads):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.supxlabel("seconds" if by_seconds else "trials")
    fig.supylabel("best GFLOPS so far (median over seeds)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plots(sets: Records, folder: Path) -> list[Path]:
    """Write each set's plots into `folder`; the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for title, workloads in sets.items():
        workloads = {wl: records for wl, records in workloads.items() if records}
        if not workloads:
            continue
        slug = _slug(title)
        if ratio_plot(f"{title}: ratio to the vendor", workloads, folder / f"{slug}-ratio.png"):
            written.append(folder / f"{slug}-ratio.png")
        for by_seconds, name in ((False, "trials"), (True, "seconds")):
            curves_plot(f"{title}: best so far against {name}", workloads, folder / f"{slug}-vs-{name}.png",
                        by_seconds)
            written.append(folder / f"{slug}-vs-{name}.png")
    return written


def section(report: str, images: Sequence[Path], page: Path) -> str:
    """The generated section: the report one heading level down, then the plots, linked from `page`."""
    text = re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", report.strip(), flags=re.MULTILINE)
    links = [f"![{p.stem}]({p.relative_to(page.parent).as_posix()})" for p in images]
    return "\n\n".join([BEGIN, text, *links, END])


def publish(page: Path, report: str, images: Sequence[Path]) -> None:
    """Put the generated section into `page` in place of the last one (after its title where there is none)."""
    old = page.read_text() if page.exists() else "# Results\n"
    new = section(report, images, page)
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        text = head + new + rest.split(END, 1)[1]
    else:
        title, _, body = old.partition("\n")
        text = f"{title}\n\n{new}\n{body}"
    page.write_text(text)

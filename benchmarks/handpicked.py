"""The hand-picked config of each workload through the trial's measure path, next to the vendor library.

    python -m benchmarks.handpicked [--target auto] [op/spec ...]   (default: the original study's eight)

Prints one row per workload: status, GFLOPS, latency, and on CUDA the cuBLAS/cuDNN FP32 (TF32 off)
figures measured in the same run (where PyTorch is installed), with the ratio.
"""
from __future__ import annotations

import argparse
import json

from trial.measure import Options, measure
from trial.workload import parse_name

from .vendor import baseline

STUDY = ["mm/N512K1024M1024", "mm/N512K1024M4096", "mm/N512K4096M1024", "bmm/B960N128K128M64PNN",
         "bmm/B960N128K128M64PTN", "bmm/B960N128K64M128PNT", "conv/N512C3HW227F64K11ST4PD0",
         "conv/N512C64HW27F192K5ST1PD2"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", nargs="*", default=STUDY, help="op/spec, e.g. mm/N512K1024M1024")
    p.add_argument("--target", default="auto")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args()
    options = Options(target=args.target)
    rows = []
    print(f"{'workload':34} {'status':9} {'GFLOPS':>9} {'ms':>9} {'vendor GFLOPS':>14} {'ratio':>6}")
    for name in args.workloads:
        wl = parse_name(name)
        r = measure(wl, None, options)
        row = {"workload": name, **r.report()}
        vendor = baseline(wl, r.target, options.repeat, options.min_repeat_ms)
        if vendor:
            row["vendor"] = vendor
        ratio = f"{r.gflops / vendor['gflops']:.2f}" if vendor else "-"
        print(f"{name:34} {r.status:9} {r.gflops:9.1f} {r.latency_ms or 0:9.3f} "
              f"{vendor['gflops'] if vendor else 0:14.1f} {ratio:>6}  {r.reason[:80]}", flush=True)
        rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

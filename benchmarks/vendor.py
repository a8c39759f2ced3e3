"""The vendor library (cuBLAS/cuDNN through PyTorch, trial/vendor.py) on workloads, as the benchmarks time it:

    python -m benchmarks.vendor conv/N512C64HW27F192K5ST1PD2 [--cudnn-heuristics]

A convolution's row gives the latency of each of cuDNN's algorithm searches' picks too, the figure the fastest.
"""
from __future__ import annotations

import argparse
import sys

from trial.vendor import baseline
from trial.workload import SpecError, parse_name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vendor",
                                description="Time the vendor library on workloads, as the benchmarks do.")
    p.add_argument("workloads", nargs="+", help="op/spec, e.g. conv/N512C64HW27F192K5ST1PD2")
    p.add_argument("--cudnn-heuristics", action="store_true",
                   help="let cuDNN pick its algorithm by heuristics (cudnn.benchmark off) instead of by timing")
    args = p.parse_args(argv)
    try:
        workloads = [parse_name(name) for name in args.workloads]
    except SpecError as err:
        p.error(str(err))
    rows = ["| workload | library | timing | ms | GFLOPS | each cuDNN search's pick, ms |",
            "| --- | --- | --- | ---: | ---: | --- |"]
    for wl in workloads:
        found = baseline(wl, "cuda", cudnn_benchmark=not args.cudnn_heuristics)
        if found is None:
            print(f"{wl.name}: no vendor figure (it needs PyTorch with a CUDA device, and a library call for "
                  f"this type and op)", file=sys.stderr)
            return 1
        searches = ", ".join(f"{ms:.4f}" for ms in found.get("searches", [])) or "-"
        rows.append(f"| {wl.name} | {found['library']} | {found['timing']} | {found['latency_ms']:.4f} | "
                    f"{found['gflops']:,.1f} | {searches} |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

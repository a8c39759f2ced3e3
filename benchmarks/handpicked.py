"""The hand-picked config of each workload through the trial's measure path, next to the vendor library.

    python -m benchmarks.handpicked [--target auto] [--json FILE] [op/spec ...]   (default: the study's eight)

Prints one row per workload: status, GFLOPS, latency, and on CUDA the cuBLAS/cuDNN FP32 (TF32 off)
figures measured in the same run (where PyTorch is installed), with the ratio.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from trial.measure import Options, measure
from trial.workload import parse_name

from trial.vendor import baseline

STUDY = ["mm/N512K1024M1024", "mm/N512K1024M4096", "mm/N512K4096M1024", "bmm/B960N128K128M64PNN",
         "bmm/B960N128K128M64PTN", "bmm/B960N128K64M128PNT", "conv/N512C3HW227F64K11ST4PD0",
         "conv/N512C64HW27F192K5ST1PD2"]
LAYOUTS = ["mm/N512K1024M1024PNT", "mm/N512K1024M1024PTT"]
"""Float32 mm with B K-major, as `nn.Linear`'s weight is (on Hopper, the simt template reads it swizzled)."""
POINTWISE = ["conv/N32C64HW56F256K1ST1PD0"]
"""A float32 1x1 convolution, ResNet-50's layer1 expand at batch 32 (on Hopper, the simt template's batched
matmul: conv2d_simt.py)."""
TENSOR_CORE = ["mm/N512K1024M1024_f16", "mm/N512K4096M1024PTN_f16", "bmm/B960N128K64M128PNT_f16",
               "mm/N512K1024M1024_bf16", "bmm/B960N128K64M128PNT_bf16",
               "mm/N512K1024M1024_i8", "mm/N512K1024M1024PNT_i8", "mm/N512K1024M1024PNT_e4m3",
               "mm/N512K1024M1024PNT_tf32", "bmm/B960N128K64M128PNT_tf32", "conv/N32C64HW56F64K3ST1PD1_f16",
               "conv/N32C64HW56F256K1ST1PD0_f16", "conv/N32C8HW224F64K7ST2PD3_f16"]
"""Tensor-core workloads of the GPU check: each element type, transposed float16 operands, the 8-bit types
with B column-major, bmm in float16, bfloat16 and TF32 (on Hopper, the wgmma template's), and three float16
NHWC convolutions of ResNet-50 at batch 32 (conv2d_gemm.py on Hopper): its layer1 3x3 (an implicit GEMM), 1x1
expand (the matmul on its tensors) and stem, its 3 channels padded to 8 (conv2d_nhwc.py's direct kernel)."""
_WGMMA = {"stages": 4, "in_flight": 1, "producer": 1, "slices": 1, "epilogue": 1}
CLUSTERED = {"mm/N512K4096M1024_f16": {**_WGMMA, "rows": 64, "cols": 128, "cluster": 1, "split": 2},
             "mm/N512K1024M4096_f16": {**_WGMMA, "rows": 128, "cols": 128, "cluster": 2, "split": 1}}
"""Configs of the GPU check beyond the defaults, on Hopper only: the wgmma template's CTA clusters, split K and B
shared by a pair, with 128-column MN-major B tiles, whose descriptors read every field (a CTA's shared address
in a cluster carries its rank)."""
HEADER = ["workload", "status", "GFLOPS", "ms", "vendor GFLOPS", "ratio", "reason"]


def measure_all(workloads: list[str], options: Options, each: Callable[[dict[str, Any]], None] = lambda row: None,
                configs: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each workload's hand-picked config (or its config in `configs`) measured, with the vendor's figure where
    there is one."""
    rows = []
    for name in workloads:
        wl = parse_name(name)
        r = measure(wl, (configs or {}).get(name), options)
        row = {"workload": name, **r.report()}
        vendor = baseline(wl, r.target, options.repeat, options.min_repeat_ms)
        if vendor:
            row["vendor"] = vendor
        rows.append(row)
        each(row)
    return rows


def cells(row: dict[str, Any]) -> list[str]:
    """The row as the table's cells (HEADER)."""
    vendor = row.get("vendor")
    ratio = f"{row['gflops'] / vendor['gflops']:.2f}" if vendor else "-"
    reason = row["reason"] or (f"vendor's output: {vendor['check']}" if vendor and vendor.get("check") else "")
    return [row["workload"], row["status"], f"{row['gflops']:.1f}", f"{row['latency_ms'] or 0:.4f}",
            f"{vendor['gflops']:.1f}" if vendor else "-", ratio, reason[:80]]


def markdown(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
                      *("| " + " | ".join(r) + " |" for r in rows)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", nargs="*", default=STUDY, help="op/spec, e.g. mm/N512K1024M1024")
    p.add_argument("--target", default="auto")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args()
    print(" | ".join(HEADER), flush=True)
    rows = measure_all(args.workloads, Options(target=args.target),
                       lambda row: print(" | ".join(cells(row)), flush=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

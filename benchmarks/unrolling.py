"""Who unrolls the Hopper float32 template's loops: TVM (in the CUDA source) or NVVM (`#pragma unroll`)?

    python -m benchmarks.unrolling [WORKLOAD ...] [--configs 11] [--seed 1] [--json FILE]

For each workload (default: the study's three float32 mm), its hand-picked config and --configs valid
configs drawn from the template's space on this GPU (`ConstrainedSpace.sample`, seeded) are built both
ways in this process (the scheduling, TVM's passes and NVRTC) and each kernel is verified against the
float64 reference and timed as a trial times it (`trial.run.run`: CUDA graphs, median of 5 repeats of at
least 40 ms), the two builds of a config alternating which goes first.  Prints one row per config and a
summary per workload in markdown: seconds to build, and the NVVM-unrolled kernel's time over TVM's
(below 1: NVVM's is faster).  Needs a Hopper GPU.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from searchspace import ConstrainedSpace, SearchSpace
from trial import run, target, verify
from trial.constraints import KernelRules
from trial.inputs import number_type
from trial.templates import simt
from trial.target import TargetError
from trial.workload import SpecError, parse_name

STUDY_FP32_MM = ["mm/N512K1024M1024", "mm/N512K4096M1024", "mm/N512K1024M4096"]
WAYS = {"TVM": True, "NVVM": False}  # who unrolls: simt.compile_kernel's explicit_unroll


def build_and_time(wl: Any, config: dict[str, Any], tgt: Any, reference: Any, explicit: bool) -> tuple[float, float]:
    """Seconds to build `config` with or without TVM's explicit unrolling, and its kernel's median seconds."""
    start = time.perf_counter()
    library = simt.compile_kernel(simt.schedule(wl, config, tgt), tgt, explicit_unroll=explicit)
    built = time.perf_counter() - start
    return built, run.run(library.mod, tgt.device(0), reference, 5, 40).median_s


def compare(workload: str, count: int, seed: int, tgt: Any) -> list[dict[str, Any]]:
    """One row per config of `workload`: the hand-picked one first, then `count` sampled ones."""
    wl = parse_name(workload)
    if not simt.applies(wl, tgt):
        raise SystemExit(f"benchmarks.unrolling: the Hopper float32 template does not serve {workload} on "
                         f"{tgt.label} ({tgt.device_name}): float32 mm, layout NN or TN, N and M multiples of "
                         f"64, K of 8, on sm_90")
    space = ConstrainedSpace.of(SearchSpace.from_json(simt.search_space(wl)), KernelRules(wl, simt, tgt))
    rng = random.Random(seed)
    configs = [simt.default_params(wl, True), *(space.sample(rng) for _ in range(count))]
    reference = verify.Reference.of(wl)
    rows = []
    for i, config in enumerate(configs):
        order = list(WAYS) if i % 2 == 0 else list(WAYS)[::-1]
        got = {way: build_and_time(wl, config, tgt, reference, WAYS[way]) for way in order}
        rows.append({"workload": workload, "config": config, "hand_picked": i == 0,
                     **{f"build_s_{way}": got[way][0] for way in WAYS},
                     **{f"ms_{way}": got[way][1] * 1e3 for way in WAYS}})
        print(f"| {workload} | {'hand-picked' if i == 0 else i} | {got['TVM'][0]:.2f} | {got['NVVM'][0]:.2f} | "
              f"{got['TVM'][1] * 1e3:.4f} | {got['NVVM'][1] * 1e3:.4f} | {got['NVVM'][1] / got['TVM'][1]:.3f} |",
              flush=True)
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | configs | build s, TVM | build s, NVVM | NVVM / TVM time: median | min | max | "
             "hand-picked |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        ratios = [r["ms_NVVM"] / r["ms_TVM"] for r in mine]
        lines.append(f"| {workload} | {len(mine)} | {sum(r['build_s_TVM'] for r in mine):.1f} | "
                     f"{sum(r['build_s_NVVM'] for r in mine):.1f} | {statistics.median(ratios):.3f} | "
                     f"{min(ratios):.3f} | {max(ratios):.3f} | {ratios[0]:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.unrolling", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("workloads", nargs="*", default=STUDY_FP32_MM, help="float32 mm workloads (op/spec)")
    p.add_argument("--configs", type=number_type(int, 0, 1000), default=11,
                   help="sampled configs a workload, beside the hand-picked one (default 11)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    for workload in args.workloads:
        try:
            parse_name(workload)
        except SpecError as err:
            p.error(str(err))
    try:
        tgt = target.resolve("cuda")
    except TargetError as err:
        print(f"benchmarks.unrolling: {err}", file=sys.stderr)
        return 2
    print(f"# Loops unrolled by TVM or by NVVM on {tgt.device_name} ({tgt.label})\n\n"
          "| workload | config | build s, TVM | build s, NVVM | ms, TVM | ms, NVVM | NVVM / TVM |\n"
          "| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    rows = [row for workload in args.workloads for row in compare(workload, args.configs, args.seed, tgt)]
    print("\n" + summary(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

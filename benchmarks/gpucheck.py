"""The GPU check: does this machine measure kernels on its GPU, from a single trial to a whole experiment?

    python -m benchmarks.gpucheck [--trials 64] [--port 8080] [--json FILE]      (make gpu-check)

1. The hand-picked config of each of the study's eight workloads, of float32 mm with B K-major
   (handpicked.LAYOUTS) and a float32 1x1 convolution (handpicked.POINTWISE), and of tensor-core workloads in each
   element type the GPU has (handpicked.TENSOR_CORE), through the measure path, next to cuBLAS/cuDNN in
   the same type (FP32 with TF32 off) timed in the same run; on Hopper also the wgmma template's CTA
   clusters (handpicked.CLUSTERED).
2. An OpEvo experiment of --trials trials on mm/N512K1024M1024 through `nnictl create`, as a user
   starts one (cold: no warm start from the records), stopped at its end.
Prints both tables in markdown; exits 1 if a hand-picked config is not `ok`, the vendor's output differs
from the float64 reference the suite's kernels are checked against, or the experiment verified no
kernel; 2 if there is no GPU here (--target llvm runs it on the CPU, for tests).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from experiments.write import auto_concurrency
from trial.inputs import number_type
from trial.measure import Options, device
from trial.results import Status
from trial.target import TargetError
from trial.workload import parse_name

from .experiments import nnictl_experiment, write_folder
from .handpicked import CLUSTERED, HEADER, LAYOUTS, POINTWISE, STUDY, TENSOR_CORE, cells, markdown, measure_all

EXPERIMENT = "mm/N512K1024M1024"


def experiment(workload: str, trials: int, concurrency: int | None, port: int, target: str) -> dict[str, Any]:
    """One cold OpEvo experiment through nnictl (None: this machine's concurrency): what it measured, its
    best and its pace."""
    os.environ["OPEVO_TARGET"] = target  # the experiment's trials measure where this check does
    concurrency = auto_concurrency(target) if concurrency is None else concurrency
    folder = write_folder(parse_name(workload), Path(tempfile.mkdtemp(prefix="opevo-gpucheck-")), trials, concurrency)
    done = nnictl_experiment(folder, "opevo", port, timeout_s=1800, poll_s=2)
    metrics = [r.metric for r in done.records if r.metric]
    ok = [m for m in metrics if m["status"] == Status.OK]
    end = done.last_end if done.last_end is not None else done.started + done.wall_s
    return {"workload": workload, "experiment": done.id, "concurrency": concurrency, "nni_status": done.final,
            "trials": len(done.records), "measured": len(metrics),
            "statuses": dict(Counter(m["status"] for m in metrics)),
            "best_gflops": max((m["gflops"] for m in ok), default=0.0), "wall_s": end - done.started,
            "trials_per_s": len(metrics) / max(end - done.started, 1e-9)}


def cluster_label(params: dict[str, Any]) -> str:
    """How a row of `CLUSTERED` shares its tiles: `rows x cols, split S` or `rows x cols, cluster C`."""
    shared = f"split {params['split']}" if params["split"] > 1 else f"cluster {params['cluster']}"
    return f"{params['rows']} x {params['cols']}, {shared}"


def problems(rows: list[dict[str, Any]], exp: dict[str, Any]) -> list[str]:
    """What fails the check: a hand-picked config not `ok`, a vendor output that the reference rejects,
    an experiment that verified no kernel."""
    failed = [r["workload"] for r in rows if r["status"] != Status.OK]
    found = [f"hand-picked config not ok: {', '.join(failed)}"] if failed else []
    differ = [r["workload"] for r in rows if (r.get("vendor") or {}).get("check")]
    if differ:
        found.append(f"the vendor's output differs from the float64 reference: {', '.join(differ)}")
    if exp["best_gflops"] <= 0:
        found.append("the experiment verified no kernel")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpucheck", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--trials", type=int, default=64, help="trials of the OpEvo experiment (default 64)")
    p.add_argument("--concurrency", type=number_type(int, 1, 1024),
                   help="the experiment's trialConcurrency, 1 to 1024 (default: this machine's, as "
                        "`experiments.write` gives it)")
    p.add_argument("--port", type=int, default=8080, help="the experiment's web UI port (default 8080)")
    p.add_argument("--target", default="auto", help="auto (the GPU) or a kind; llvm runs the check on the CPU")
    p.add_argument("--workloads", nargs="+", help="hand-picked workloads (default: the study's eight, "
                                                  "handpicked.LAYOUTS and POINTWISE, the tensor-core ones this GPU "
                                                  "can run)")
    p.add_argument("--experiment", default=EXPERIMENT, help=f"the experiment's workload (default {EXPERIMENT})")
    p.add_argument("--json", type=Path, help="also write both tables' data here")
    args = p.parse_args(argv)
    try:
        where = device(args.target)
    except TargetError as err:
        print(f"gpucheck: {err}", file=sys.stderr)
        return 2
    if not where.is_gpu and args.target == "auto":
        print("gpucheck: no GPU here (TVM found no CUDA or ROCm device); --target llvm checks the CPU",
              file=sys.stderr)
        return 2
    workloads = args.workloads or [*STUDY, *LAYOUTS, *POINTWISE, *(w for w in TENSOR_CORE
                                             if parse_name(w).element.min_arch <= where.cuda_arch)]
    start = time.monotonic()
    print(f"# GPU check on {where.device_name} ({where.label})\n\n## Hand-picked configs\n", flush=True)
    rows = measure_all(workloads, Options(target=args.target))
    if not args.workloads and where.cuda_arch == 90:  # the wgmma template's clusters (handpicked.CLUSTERED)
        clustered = measure_all(list(CLUSTERED), Options(target=args.target), configs=CLUSTERED)
        rows += [{**r, "workload": f"{r['workload']} ({cluster_label(CLUSTERED[r['workload']])})"} for r in clustered]
    print(markdown(HEADER, [cells(r) for r in rows]), flush=True)
    exp = experiment(args.experiment, args.trials, args.concurrency, args.port, args.target)
    vendor = next((r["vendor"]["gflops"] for r in rows if r["workload"] == args.experiment and "vendor" in r), None)
    print(f"\n## OpEvo through nnictl create ({exp['experiment']}, NNI status {exp['nni_status']})\n")
    print(markdown(["workload", "trialConcurrency", "trials", "measured", "statuses", "best GFLOPS", "vs vendor",
                    "wall s", "trials/s"],
                   [[exp["workload"], str(exp["concurrency"]), str(exp["trials"]), str(exp["measured"]),
                     ", ".join(f"{k} {v}" for k, v in sorted(exp["statuses"].items())), f"{exp['best_gflops']:.1f}",
                     f"{exp['best_gflops'] / vendor:.2f}" if vendor else "-", f"{exp['wall_s']:.1f}",
                     f"{exp['trials_per_s']:.2f}"]]))
    found = problems(rows, exp)
    if args.json:
        args.json.write_text(json.dumps({"device": where.describe(), "handpicked": rows, "experiment": exp}, indent=1))
    verdict = "FAILED: " + "; ".join(found) if found else "passed"
    print(f"\nGPU check {verdict} ({time.monotonic() - start:.0f} s)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())

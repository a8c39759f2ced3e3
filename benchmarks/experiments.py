"""Run generated experiments through `nnictl create` and summarise them against the vendor library.

    python -m benchmarks.experiments mm/N512K1024M1024 --tuners opevo gbfs na2c --trials 128 [--together]

Each tuner's experiment is written to a scratch folder with the given trial budget and run to
the end exactly as a user runs it.  Per tuner it prints the best GFLOPS, the trials it took to
reach 95 % of that, the wall time per trial, and (on CUDA) cuBLAS/cuDNN FP32 with TF32 off
measured in the same run.  --together runs the tuners' experiments at the same time (the trials'
device lock still serialises timing), which saves machine time but shares the CPU among them.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trial import space, tune

from .compare import trials_to
from .plots import best_so_far
from trial.workload import parse


def run_one(wl, tuner: str, trials: int, concurrency: int, port: int, root: Path, timeout_s: float) -> dict:
    folder = space.write(wl, root / tuner, max_trials=trials, concurrency=concurrency)
    start = time.monotonic()
    exp_id = tune.create(folder / f"config_{tuner}.yml", port)

    def progress(state: str, records: list) -> None:
        top = tune.best(records)
        print(f"[{time.monotonic() - start:6.0f} s] {tuner}: {state}, {sum(1 for r in records if r.metric)} measured,"
              f" best {top.metric['gflops'] if top else 0:.1f} GFLOPS", flush=True)

    final = tune.wait(port, timeout_s=timeout_s, poll_s=10, progress=progress)
    wall = time.monotonic() - start
    records = tune.trials(port)
    tune.nnictl("stop", exp_id, check=False)
    order = sorted(records, key=lambda r: int(r.parameter_id if r.parameter_id is not None else 1 << 30))
    curve = best_so_far([r.metric["gflops"] if r.metric and r.metric.get("status") == "ok" else 0.0
                         for r in order])
    best = curve[-1] if curve else 0.0
    to95 = trials_to(0.95, curve)
    statuses: dict[str, int] = {}
    for r in records:
        s = r.metric["status"] if r.metric else f"nni:{r.status}"
        statuses[s] = statuses.get(s, 0) + 1
    return {"tuner": tuner, "experiment": exp_id, "final_status": final, "trials": len(records),
            "best_gflops": best, "trials_to_95": to95, "wall_s": wall, "wall_per_trial_s": wall / max(1, len(records)),
            "statuses": statuses, "curve": curve,
            "best_params": (tune.best(records).metric["params"] if tune.best(records) else None)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", help="op/spec, e.g. mm/N512K1024M1024")
    p.add_argument("--tuners", nargs="+", default=["opevo"], choices=sorted([*space.TUNERS, *space.BUILTIN_TUNERS]))
    p.add_argument("--trials", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=space.CONCURRENCY)
    p.add_argument("--together", action="store_true", help="run the tuners' experiments at the same time")
    p.add_argument("--port", type=int, default=8080, help="first web UI port; one port per tuner")
    p.add_argument("--timeout", type=float, default=24 * 3600, help="stop each experiment after this many seconds")
    p.add_argument("--json", help="write the summary (with each tuner's best-so-far curve) here")
    args = p.parse_args()
    op, spec = args.workload.split("/")
    wl = parse(op, spec)
    root = Path(tempfile.mkdtemp(prefix="opevo-bench-"))
    jobs = [(t, args.port + i) for i, t in enumerate(args.tuners)]
    with ThreadPoolExecutor(len(jobs) if args.together else 1) as pool:
        rows = list(pool.map(lambda j: run_one(wl, j[0], args.trials, args.concurrency, j[1], root, args.timeout), jobs))
    vendor = None
    if any(r["best_params"] for r in rows):
        try:
            from .vendor import time_vendor
            vendor = time_vendor(wl)
        except (ImportError, RuntimeError, AssertionError):
            vendor = None  # no PyTorch or no CUDA device: no vendor baseline here
    print(f"{args.workload}: {args.trials} trials per tuner, concurrency {args.concurrency}"
          f"{', experiments run together' if args.together else ''}")
    print(f"{'tuner':8} {'best GFLOPS':>12} {'to 95%':>7} {'s/trial':>8} {'vs vendor':>10}  statuses")
    for r in rows:
        ratio = f"{r['best_gflops'] / vendor['gflops']:.2f}" if vendor else "-"
        print(f"{r['tuner']:8} {r['best_gflops']:12.1f} {r['trials_to_95'] or '-':>7} "
              f"{r['wall_per_trial_s']:8.2f} {ratio:>10}  {r['statuses']}")
    if vendor:
        print(f"{vendor['library']} FP32 (TF32 off): {vendor['gflops']:.1f} GFLOPS, {vendor['latency_ms']:.4f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": args.workload, "rows": rows, "vendor": vendor}, indent=1))


if __name__ == "__main__":
    main()

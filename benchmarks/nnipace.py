"""Where an nnictl trial's time goes, and how many trials a second an experiment measures on 1..N GPUs.

    python -m benchmarks.nnipace mm/N512K1024M1024 --trials 128 [--gpus 0 0,1 0,1,2,3] [--concurrency auto|N ...]
                                 [--runner rpc://HOST:PORT/KEY] [--driver] [--tuner opevo] [--port 8080] [--json F]
    python -m benchmarks.nnipace mm/N512K1024M1024 --trials 256 --gpus 0,1 rpc://HOST:PORT/KEY

Per set of GPUs (CUDA_VISIBLE_DEVICES of the experiment, its trials and their measuring service) and
trialConcurrency (one for all sets, or one a set; auto: `experiments.write.auto_concurrency`), one
cold experiment through `nnictl create`, as a user starts it, with $OPEVO_TIMELINE set so that each
trial process and the tuner write their timestamps (trial/timeline.py); joined with NNI's own end time
of each trial job, they give the mean seconds of each hop of a trial:

  tuner holds   NNI asked the tuner for parameters -> the tuner sent them (OpEvo waits for results
                once `offspring_size` are in flight)
  to process    the tuner sent them -> the trial process exists (NNI's manager loop, every 0.5 s, and its
                trial keeper; negative where NNI starts the process first, which then waits in `parameters`)
  imports       the process exists -> the trial asks for its parameters (Python and the trial's imports)
  parameters    -> it holds them (NNI's trial channel, through the measuring service)
  measure       build, run, verify, time (`trial.results.STAGES`, the means of the main ones shown)
  report        the result to NNI's trial channel
  exit          reported -> NNI's end time of the trial job (the records, the interpreter's exit)
  to tuner      reported -> the tuner has the result (beside `exit`)
  slot idle     per trial, the seconds a trial slot had no process: trialConcurrency x span minus
                the trials' lifetimes, over the trials

`tuner s a trial` and `tuner busy`: the seconds NNI's dispatcher spent in the tuner's calls (proposals,
results, trial ends; `tuner_call` marks) over the span, a trial and as a share of the span: the
dispatcher handles one command at a time, so a busy tuner holds back results and new trials alike.

`trials/s` counts trials from the first trial's start to the last one's end; `incl. start` from
`nnictl create` (NNI's own start-up included); `steady trials/s` between the trials that ended a
tenth and nine tenths of the way (benchmarks/spanstats.py: the experiment's ends left out, which weigh
more the more GPUs share its trials).  CPU columns, over the same span: the host's CPU
seconds a trial (all processes, from psutil's system-wide counters) and how busy its cores were; of
them, each trial process's own (Python, imports, NNI's channel, the records), the build worker's
(TVM and the CUDA compiler, the linker) and the runner's (loading, verifying, timing; a GPU's wait
spins a core), measured in those processes, and the tuner's calls' (beside `tuner s a trial`: computing or
waiting); what is left is NNI's manager, the measuring service's threads, and the rest of the host.  `of
run`: the steps of verify-and-time under the lock (trial/service/runner.py).  Device columns: the share of
the span a GPU's lock was held, the mean seconds it stood free between two trials, and the seconds of the
span before its first trial and after its last, and of them before its first (means over the GPUs).
--driver also runs the same tuner, budget and concurrency through the benchmark driver (no NNI
manager, no trial processes) on all the GPUs given last, for the rate NNI should approach.  --runner
measures through TVM's RPC tracker instead (its servers' GPUs; `auto` concurrency counts them); an RPC
runner given among --gpus is one row of the same command, so that a pair of local GPUs and a pair of
servers compare in one table.  Each rate is also given as a ratio to the first row's (`vs first`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from unittest import mock

from experiments import registry
from experiments.write import auto_concurrency, concurrency_arg
from trial import timeline
from trial.inputs import number_type
from trial.measure import Options
from trial.remote import LOCAL, add_runner_argument, runner_arg
from trial.results import Status
from trial.workload import parse_name

from .experiments import nnictl_experiment, write_folder
from .spanstats import device_use, host_busy_s, host_cpu, steady_rate

HOPS = ("tuner holds", "to process", "imports", "parameters", "measure", "report", "exit", "to tuner", "slot idle")
SHOWN_STAGES = ("build", "lock_wait", "run")
CPU_PARTS = ("trial process", "build", "run", "tuner")
RUN_PARTS = ("load", "tensors", "check", "timing")  # trial/service/runner.py's extra["run_s"]
RPC = "rpc://"


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _environment(values: dict[str, str | None]) -> Any:
    """This process's environment with `values` set (None: left as it is), restored afterwards."""
    return mock.patch.dict(os.environ, {key: value for key, value in values.items() if value is not None})


def trial_hops(events: list[dict[str, Any]], jobs: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Mean seconds of each hop (`HOPS`) over the trials that left a full timeline, and the span."""
    asked: dict[Any, float] = {}
    proposed: dict[Any, float] = {}
    by_pid: dict[int, dict[str, Any]] = defaultdict(dict)  # trial process -> its events
    tuner_result: dict[Any, float] = {}
    tuner_calls: list[tuple[float, float, float]] = []  # (start, seconds, CPU seconds) of each call to the tuner
    for e in events:
        if e["event"] == "tuner_asked":
            for pid in e["parameter_ids"]:
                asked.setdefault(pid, e["t"])
        elif e["event"] == "tuner_proposed":
            for pid in e["parameter_ids"]:
                proposed.setdefault(pid, e["t"])
        elif e["event"] == "tuner_result":
            tuner_result.setdefault(e["parameter_id"], e["t"])
        elif e["event"] == "tuner_call":
            tuner_calls.append((e["t"], e["s"], e.get("cpu_s", 0.0)))
        elif e["event"].startswith("trial_"):
            by_pid[e["pid"]][e["event"]] = e
    ends = {job["trialJobId"]: job["endTime"] / 1000 for job in jobs if job.get("endTime")}
    hops: dict[str, list[float]] = defaultdict(list)
    stages: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    run_parts: dict[str, list[float]] = defaultdict(list)
    holds: list[tuple[Any, float, float]] = []
    lifetimes = []
    for trial in by_pid.values():
        try:
            start, received = trial["trial_started"]["t"], trial["trial_received"]
            measured, reported = trial["trial_measured"], trial["trial_reported"]
        except KeyError:
            continue
        pid, end = received["parameter_id"], ends.get(received["trial"])
        if pid in asked and pid in proposed:
            hops["tuner holds"].append(proposed[pid] - asked[pid])
        if pid in proposed:
            hops["to process"].append(start - proposed[pid])
        asking = trial.get("trial_asking", received)["t"]
        hops["imports"].append(asking - start)
        hops["parameters"].append(received["t"] - asking)
        hops["measure"].append(measured["t"] - received["t"])
        hops["report"].append(reported["t"] - measured["t"])
        if end is not None:
            hops["exit"].append(end - reported["t"])
            lifetimes.append((start, end))
        if pid in tuner_result:
            hops["to tuner"].append(tuner_result[pid] - reported["t"])
        for stage, seconds in measured.get("stages", {}).items():
            stages[stage].append(seconds)
        for part, seconds in measured.get("run_s", {}).items():
            run_parts[part].append(seconds)
        lock = measured.get("device_s", {})
        if "held" in lock and "released" in lock:
            holds.append((measured.get("device"), lock["held"], lock["released"]))
        own = trial.get("trial_done", {}).get("cpu_s")
        for part, seconds in [*measured.get("cpu_s", {}).items(), ("trial process", own)]:
            if seconds is not None:
                cpu[part].append(seconds)
    out: dict[str, Any] = {"trials": len(lifetimes), "span_s": None, "first_start": None}
    if lifetimes:
        first, last = min(s for s, _ in lifetimes), max(e for _, e in lifetimes)
        busy = sum(e - s for s, e in lifetimes)
        out.update(span_s=last - first, first_start=first, last_end=last)
        hops["slot idle"] = [max(0.0, concurrency * (last - first) - busy) / len(lifetimes)]
        tuner_s = sum(s for t, s, _ in tuner_calls if first <= t <= last)
        out.update(tuner_busy=tuner_s / (last - first) if last > first else None, tuner_s=tuner_s / len(lifetimes))
        cpu["tuner"].append(sum(c for t, _, c in tuner_calls if first <= t <= last) / len(lifetimes))
        use = device_use(holds, first, last)
        out.update(device_held=use["held"], lock_free_s=use["free_s"], device_ends_s=use["ends_s"],
                   device_before_s=use["before_s"],
                   steady_trials_per_s=steady_rate([e for _, e in lifetimes]))
    out["hops"] = {hop: _mean(hops[hop]) for hop in HOPS}
    out["stages"] = {stage: _mean(values) for stage, values in stages.items()}
    out["cpu_s"] = {part: _mean(values) for part, values in cpu.items()}
    out["run_s"] = {part: _mean(values) for part, values in run_parts.items()}
    return out


def experiment(wl_name: str, tuner: str, trials: int, concurrency: int, gpus: str | None, port: int,
               target: str, runner: str = LOCAL) -> dict[str, Any]:
    """One cold nnictl experiment on `gpus` (or through `runner`) with timelines on: its rates and hops."""
    wl = parse_name(wl_name)
    scratch = Path(tempfile.mkdtemp(prefix="opevo-nnipace-"))
    (scratch / "timeline").mkdir()
    folder = write_folder(wl, scratch, trials, concurrency, runner)
    samples = [(time.time(), host_busy_s())]
    with _environment({timeline.ENV: str(scratch / "timeline"), "OPEVO_TARGET": target, "CUDA_VISIBLE_DEVICES": gpus}):
        done = nnictl_experiment(folder, tuner, port, poll_s=2,  # NNI's manager and trials inherit them
                                 progress=lambda *_: samples.append((time.time(), host_busy_s())))
    pace = trial_hops(timeline.read(str(scratch / "timeline")), done.jobs, concurrency)
    metrics = [r.metric for r in done.records if r.metric]
    ok = [m for m in metrics if m["status"] == Status.OK]
    span = pace["span_s"]
    whole = pace["last_end"] - done.started if span else None
    busy = host_cpu(samples, pace["first_start"], pace["last_end"]) if span else None
    cores = os.cpu_count() or 1
    return {"gpus": runner if runner != LOCAL else gpus or "all", "concurrency": concurrency,
            "experiment": done.id, "nni_status": done.final,
            "trials": len(done.records), "measured": len(metrics), "ok": len(ok),
            "best_gflops": max((m["gflops"] for m in ok), default=0.0),
            "devices": sorted({m.get("device", "") for m in metrics}),
            "trials_per_s": len(metrics) / span if span else 0.0,
            "trials_per_s_with_start": len(metrics) / whole if whole else 0.0,
            "start_s": pace["first_start"] - done.started if span else None,
            "host_cpu_s": busy * span / len(metrics) if busy is not None and metrics else None,
            "host_busy": busy / cores if busy is not None else None, "cores": cores, **pace}


def driver_rate(wl_name: str, tuner: str, trials: int, concurrency: int, gpus: str | None, target: str,
                runner: str = LOCAL) -> float:
    """Trials a second of the same tuner, budget and concurrency through the benchmark driver."""
    from . import driver

    with _environment({"CUDA_VISIBLE_DEVICES": gpus}):  # the measuring service is keyed by the visible devices
        run = driver.run(parse_name(wl_name), tuner, trials, seed=0, workers=concurrency,
                         options=Options(target=target, runner=runner), records=None, progress=False)
    return len(run.trials) / run.wall_s


def _gpu_set(text: str) -> str:
    """argparse type of a --gpus item: CUDA_VISIBLE_DEVICES, or an RPC runner (checked)."""
    return runner_arg(text) if text.startswith(RPC) else text


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None, first: float | None) -> str:
    return "-" if not value or not first else f"{value / first:.2f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def table(rows: list[dict[str, Any]], first: dict[str, Any] | None = None) -> str:
    """The rows as a markdown table; each rate also as a ratio to `first`'s (the command's first row)."""
    first = first or rows[0]
    header = ["GPUs", "trialConcurrency", "trials", "ok", "trials/s", "vs first", "incl. start", "start s", *HOPS,
              "tuner s a trial", "tuner busy", "steady trials/s", "vs first",
              *(f"of measure: {s}" for s in SHOWN_STAGES),
              *(f"of run: {p}" for p in RUN_PARTS), "device lock held",
              "lock free between trials s", "GPU before first and after last trial s",
              "of which before first s",
              "host CPU s a trial", "cores busy",
              *(f"CPU s: {p}" for p in CPU_PARTS)]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * 3 + " ---: |" * (len(header) - 3)]
    for r in rows:
        lines.append("| " + " | ".join([
            r["gpus"], str(r["concurrency"]), str(r["measured"]), str(r["ok"]), _cell(r["trials_per_s"]),
            _ratio(r["trials_per_s"], first["trials_per_s"]),
            _cell(r["trials_per_s_with_start"]), _cell(r["start_s"], 1), *(_cell(r["hops"][h]) for h in HOPS),
            _cell(r.get("tuner_s"), 3), _share(r.get("tuner_busy")),
            _cell(r.get("steady_trials_per_s")), _ratio(r.get("steady_trials_per_s"), first.get("steady_trials_per_s")),
            *(_cell(r["stages"].get(s)) for s in SHOWN_STAGES),
            *(_cell(r.get("run_s", {}).get(p), 3) for p in RUN_PARTS),
            _share(r.get("device_held")), _cell(r.get("lock_free_s"), 3),
            _cell(r.get("device_ends_s"), 1), _cell(r.get("device_before_s"), 1),
            _cell(r.get("host_cpu_s")),
            "-" if r.get("host_busy") is None else f"{r['host_busy']:.0%} of {r['cores']}",
            *(_cell(r.get("cpu_s", {}).get(p)) for p in CPU_PARTS)]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.nnipace", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("workload", help="op/spec, e.g. mm/N512K1024M1024")
    p.add_argument("--trials", type=number_type(int, 1, 100000), default=128)
    p.add_argument("--concurrency", nargs="+", default=["auto"], type=concurrency_arg,
                   help="trialConcurrency: a number, or auto (from the build workers and the GPUs; default); "
                        "one for every GPU set, or one a set")
    p.add_argument("--gpus", nargs="+", type=_gpu_set,
                   help="CUDA_VISIBLE_DEVICES of each experiment, e.g. 0 0,1 (default: all), or an RPC runner "
                        "rpc://HOST:PORT/KEY for one measured through its servers")
    p.add_argument("--tuner", default="opevo", choices=sorted(registry.TUNERS))
    p.add_argument("--target", default="auto", help="auto or a kind (llvm: the CPU)")
    add_runner_argument(p)
    p.add_argument("--driver", action="store_true", help="also run the benchmark driver on the last GPU set")
    p.add_argument("--port", type=number_type(int, 1, 65535), default=8080, help="web UI port")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    sets = args.gpus or [None]
    if len(args.concurrency) not in (1, len(sets)):
        p.error(f"--concurrency: give one value, or one for each of the {len(sets)} --gpus sets")
    rows = []
    for item, chosen in zip(sets, args.concurrency * len(sets) if len(args.concurrency) == 1 else args.concurrency):
        runner, gpus = (item, None) if item and item.startswith(RPC) else (args.runner, item)
        count = len(gpus.split(",")) if gpus else None
        concurrency = auto_concurrency(args.target, count, runner) if chosen == "auto" else chosen
        rows.append(experiment(args.workload, args.tuner, args.trials, concurrency, gpus, args.port, args.target,
                               runner))
        print(table(rows[-1:], rows[0]), flush=True)
    print(f"\n## {args.workload}, {args.tuner}, {args.trials} trials through nnictl (devices: "
          f"{', '.join(sorted({d for r in rows for d in r['devices']}))})\n\n{table(rows)}")
    if args.driver:
        last = rows[-1]
        rate = driver_rate(args.workload, args.tuner, args.trials, last["concurrency"], args.gpus[-1] if args.gpus
                           else None, args.target, args.runner)
        print(f"\ndriver, same tuner, budget and concurrency on GPUs {last['gpus']}: {rate:.2f} trials/s; "
              f"nnictl / driver = {last['trials_per_s'] / rate:.2f}")
        rows.append({"driver_trials_per_s": rate})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("ok", 1) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""TVM MetaSchedule as a peer of the suite's tuners: same workload, trial budget, target and final timing.

`run` tunes the template's unscheduled TensorIR (`prim_func(wl)`) with `tune_tir` and its defaults
(evolutionary search, XGBoost cost model, the target's default schedule rules; its tensor-core rules for
float16, int8 and float8 on CUDA), given the budget as `max_trials_global`.  A label
`metaschedule[init_min_unmeasured=8,max_fail_count=20]` sets arguments of its evolutionary search
(`STRATEGY_ARGS`): where few of its sampled schedules pass its GPU checks, the defaults give up before
the first round (the study's 11x11 conv; docs/benchmarks.md, "MetaSchedule as a peer").  Its candidates
are built by its own builder and then verified and timed by the measuring service as the suite's
kernels are (`ServiceRunner`: every GPU of the host takes them, each timed from a CUDA graph, a wrong
output a failed candidate), so its cost model learns from the same figures, and each one is reported as
a trial.  Its best schedule is then compiled into a library, which the suite verifies and times like any
trial's (`trial.measure.measure_library`): that is the figure to compare.

Everything happens in a child process, so the caller never imports TVM or holds a GPU context, and a
crash of MetaSchedule becomes a result.  Two costs of MetaSchedule's set-up are cut: `TuneContext`
imports the tensor intrinsics of every target (45 s on a 2-core machine, 34 s of it CUDA's) where the
schedule rules of one target only look up its own, and LocalBuilder's default build function imports
them again in every build worker for every batch.
"""
from __future__ import annotations

import importlib
import importlib.util
import multiprocessing as mp
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

from trial.measure import Options, measure_library
from trial.results import MeasureResult, Status, error_reason
from trial.service.worker import DEVICE_VARIABLES
from trial.workload import Workload, parse

from .driver import Progress, Run, Trial, variant

NAME = "metaschedule"
STRATEGY_ARGS = ("population_size", "init_measured_ratio", "init_min_unmeasured", "max_fail_count",
                 "genetic_num_iters", "genetic_mutate_prob", "genetic_max_fail_count", "eps_greedy")
"""The arguments of TVM 0.27's EvolutionarySearch, which a label may set."""
TRIALS_PER_ITER = 64  # tune_tir's default number of candidates measured per search iteration
_INTRINSICS = {"cuda": ("cuda",), "rocm": ("rocm",), "llvm": ("x86", "arm_cpu", "riscv_cpu")}
_ROOT = str(Path(__file__).resolve().parent.parent)


def is_label(label: str) -> bool:
    """Whether `label` names MetaSchedule (`metaschedule`, or with search arguments)."""
    return label.split("[", 1)[0] == NAME


def strategy(label: str) -> dict[str, Any]:
    """The EvolutionarySearch arguments of a MetaSchedule label ({} for its defaults); ValueError if malformed."""
    _, args = variant(label, (NAME,))
    unknown = sorted(set(args) - set(STRATEGY_ARGS))
    if unknown:
        raise ValueError(f"unknown MetaSchedule search argument(s) {', '.join(unknown)} in {label!r}: "
                         f"expected {', '.join(STRATEGY_ARGS)}")
    return args


def _register_intrinsics(kind: str) -> None:
    """Register the tensor intrinsics of target `kind` only, and mark their package as imported."""
    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        package = importlib.util.module_from_spec(importlib.util.find_spec(name))
        sys.modules[name] = package
        setattr(sys.modules["tvm.s_tir"], "tensor_intrin", package)
    for module in _INTRINSICS[kind]:
        importlib.import_module(f"{name}.{module}")


def build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build function without its import of every target's tensor intrinsics, through
    the suite's compile pipeline (trial/build.py: its warp-memory fix serves MetaSchedule's tensor-core
    kernels as it serves the suite's)."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from trial.build import compile_module

    return compile_module(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target, runtime_module=True)


def _ms_target(target: Any) -> Any:
    """The suite's target with what MetaSchedule's rules read: the device's limits, or the core count."""
    import tvm
    from tvm.s_tir.meta_schedule.utils import cpu_count

    config = dict(target.target)
    if target.is_gpu:
        lim = target.limits
        config.update(max_threads_per_block=lim.max_threads_per_block, thread_warp_size=lim.warp_size,
                      max_shared_memory_per_block=lim.max_shared_memory_per_block,
                      registers_per_block=lim.max_registers_per_block)
    else:
        config["num-cores"] = cpu_count(logical=False)
    return tvm.target.Target(config)


def _space(wl: Workload, target: Any, ms: Any) -> Any:
    """MetaSchedule's search space: its tensor-core rules, postprocessors and mutators for a narrow type on
    CUDA (they are not the target's default), else the default."""
    if wl.element.mma_k and target.kind == "cuda":
        return ms.space_generator.PostOrderApply(sch_rules="cuda-tensorcore", postprocs="cuda-tensorcore",
                                                 mutator_probs="cuda-tensorcore")
    return "post-order-apply"


def _classes() -> tuple[type, type, type]:
    """The builder, runner and measure callback that time MetaSchedule's batches and report its trials."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import PyBuilder
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
    from tvm.s_tir.meta_schedule.runner import PyRunner

    from trial import devicelock

    @derived_object
    class TimedBuilder(PyBuilder):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner, self.seconds = inner, 0.0

        def build(self, build_inputs: list) -> list:
            """The inner LocalBuilder's, its worker processes started with no GPU in sight: each opened a CUDA
            context of 518 MiB otherwise (16 on an H100 machine; docs/gpu-processes.md).  It holds the CPU
            shared, as the measuring service's builds do, so no CPU kernel is timed meanwhile."""
            start = time.perf_counter()
            with devicelock.cores(exclusive=False), mock.patch.dict(os.environ, dict.fromkeys(DEVICE_VARIABLES, "")):
                results = self.inner.build(build_inputs)
            self.seconds = time.perf_counter() - start
            return results

    @derived_object
    class ServiceRunner(PyRunner):
        """A batch's candidates verified and timed by the measuring service at once (`measure_library`), as
        the suite's kernels are, on every GPU; a wrong output fails a candidate.  Its futures are finished."""

        def __init__(self, wl: Workload, options: Options) -> None:
            super().__init__()
            self.wl, self.options, self.lock_wait_s, self.seconds = wl, options, 0.0, 0.0

        def run(self, runner_inputs: list) -> list:
            from tvm.s_tir.meta_schedule.runner import RunnerFuture, RunnerResult

            with ThreadPoolExecutor(max(1, len(runner_inputs))) as pool:
                measured = list(pool.map(lambda one: measure_library(self.wl, Path(one.artifact_path), self.options),
                                         runner_inputs))
            self.lock_wait_s = sum(m.extra.get("stages", {}).get("lock_wait", 0.0) for m in measured)
            self.seconds = sum(m.extra.get("stages", {}).get("run", 0.0) for m in measured)
            results = [RunnerResult([r / 1e3 for r in m.extra.get("repeats_ms") or [m.latency_ms]], None)
                       if m.status == Status.OK else RunnerResult(None, f"{m.status}: {m.reason}") for m in measured]
            return [RunnerFuture(lambda: True, lambda result=result: result) for result in results]

    @derived_object
    class Report(PyMeasureCallback):
        """Sends each measured candidate to the parent as a trial, with the batch's times shared out."""

        def __init__(self, conn: Any, flops: int, builder: Any, runner: Any) -> None:
            super().__init__()
            self.conn, self.flops, self.builder, self.runner = conn, flops, builder, runner

        def apply(self, task_scheduler: Any, task_id: int, measure_candidates: list, builder_results: list,
                  runner_results: list) -> None:
            n = max(1, len(measure_candidates))
            stages = {"build": self.builder.seconds / n, "lock_wait": self.runner.lock_wait_s / n,
                      "run": self.runner.seconds / n}
            for built, ran in zip(builder_results, runner_results):
                error = built.error_msg or ran.error_msg
                row: dict[str, Any] = {"build_s": stages["build"], "extra": {"stages": stages}}
                if error:
                    status = (Status.TIMEOUT if "Timeout" in error else
                              Status.COMPILE_ERROR if built.error_msg else Status.RUNTIME_ERROR)
                    row.update(status=status, reason=error.strip().splitlines()[0][:600])
                else:
                    secs = [float(s) for s in ran.run_secs]
                    median = statistics.median(secs)
                    row.update(status=Status.OK, reason="", gflops=self.flops / median / 1e9, latency_ms=median * 1e3,
                               latency_std_ms=statistics.pstdev(secs) * 1e3)
                self.conn.send(("trial", row))

    return TimedBuilder, ServiceRunner, Report


def _final(sch: Any, ms_target: Any, library: Path) -> dict[str, Any]:
    """Compile the best schedule into `library`, for the suite's run path to verify and time."""
    from trial.build import compile_module

    if sch is None:
        return {"status": Status.INVALID, "reason": "MetaSchedule found no valid schedule"}
    start = time.perf_counter()
    try:
        compile_module(sch.mod, ms_target).export_library(str(library))
    except Exception as err:  # the tuned schedule fails to compile outside MetaSchedule's builder
        return {"status": Status.COMPILE_ERROR, "reason": error_reason(err)}
    return {"status": "built", "build_s": time.perf_counter() - start, "extra": {"trace": str(sch.trace)}}


def _child(conn: Any, op: str, spec: str, trials: int, seed: int, options: Options, work_dir: str,
           search: dict[str, Any]) -> None:
    os.dup2(2, 1)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    import logging

    from tvm.s_tir import meta_schedule as ms

    from trial import templates
    from trial.target import TargetError, resolve

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)  # the log files keep everything
    wl = parse(op, spec)
    try:
        target = resolve(options.target)
    except TargetError as err:
        conn.send(("final", {"status": Status.INVALID, "reason": str(err)}))
        return
    _register_intrinsics(target.kind)
    ms_target = _ms_target(target)
    conn.send(("target", {"target": target.label, "device": target.device_name}))
    TimedBuilder, ServiceRunner, Report = _classes()
    builder = TimedBuilder(ms.builder.LocalBuilder(f_build=build, timeout_sec=options.build_timeout_s))
    runner = ServiceRunner(wl, options)
    func = templates.load(wl, options.template).prim_func(wl)
    conn.send(("setup", time.perf_counter() - start))
    try:
        database = ms.tune_tir(func, ms_target, work_dir, max_trials_global=trials,
                               num_trials_per_iter=min(TRIALS_PER_ITER, trials), builder=builder, runner=runner,
                               space=_space(wl, target, ms), strategy=ms.search_strategy.EvolutionarySearch(**search),
                               measure_callbacks=[Report(conn, wl.flops, builder, runner),
                                                  *ms.measure_callback.MeasureCallback.create("default")],
                               seed=seed)
        best = ms.tir_integration.compile_tir(database, func, ms_target)
    except Exception as err:  # MetaSchedule itself failed: the run ends with what it measured
        conn.send(("final", {"status": Status.RUNTIME_ERROR, "reason": f"MetaSchedule failed: {error_reason(err)}"}))
        return
    conn.send(("tuned", None))
    conn.send(("final", _final(best, ms_target, Path(work_dir) / "best.so")))


def run(wl: Workload, trials: int, seed: int, work_dir: str | os.PathLike[str], options: Options = Options(),
        progress: bool = True, label: str = NAME) -> Run:
    """One seeded MetaSchedule run of `trials` trials, its search set by `label` (`strategy`); its database
    and logs stay in `work_dir`."""
    search = strategy(label)
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sender, wl.op, wl.spec, trials, seed, options, str(work_dir), search),
                       daemon=False)
    out = Run(label, seed, workers=1)
    bar = Progress(trials, f"{label} seed {seed}", progress)
    where: dict[str, str] = {}
    start = time.perf_counter()
    tuned_at = None
    proc.start()
    sender.close()
    try:
        while out.final is None:
            try:
                kind, payload = receiver.recv()
            except EOFError:
                proc.join(5)
                out.final = MeasureResult(Status.RUNTIME_ERROR, f"MetaSchedule process exited with code {proc.exitcode} "
                                          f"after {len(out.trials)} trials", **where)
                break
            now = time.perf_counter() - start
            if kind == "target":
                where = payload
            elif kind == "setup":
                out.setup_s = payload
            elif kind == "trial":
                result = MeasureResult(**payload, **where)
                seconds = sum(result.extra["stages"].values())
                out.trials.append(Trial(len(out.trials) + 1, None, result, now, seconds))
                bar.add(result)
            elif kind == "tuned":
                tuned_at = now
            elif payload["status"] != "built":
                out.final = MeasureResult(**payload, **where)
            else:  # verified and timed as every trial of the suite is
                final = measure_library(wl, Path(work_dir) / "best.so", options)
                final.build_s, final.extra = payload["build_s"], {**final.extra, **payload["extra"]}
                out.final = final
    finally:
        bar.close()
        receiver.close()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    out.wall_s = time.perf_counter() - start
    measured = sum(t.seconds for t in out.trials)
    out.tuner_s = max(0.0, (tuned_at or out.wall_s) - out.setup_s - measured)
    out.ended = "budget" if len(out.trials) >= trials else "no more trials"
    return out

"""MetaSchedule's side of a peer run (benchmarks/metaschedule.py), in a process of its own: its target and
search space, the builder, runner and measure callback through which the suite times its candidates and
hears of its trials, and its best schedules compiled into libraries for the suite to verify and time.

Two costs of MetaSchedule's set-up are cut: `TuneContext` imports the tensor intrinsics of every target
(45 s on a 2-core machine, 34 s of it CUDA's) where the schedule rules of one target only look up its
own, and LocalBuilder's default build function imports them again in every build worker for every batch.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

from trial.measure import Options, measure_library
from trial.results import Status, error_reason
from trial.service.worker import DEVICE_VARIABLES
from trial.workload import Workload, parse

TRIALS_PER_ITER = 64  # tune_tir's default number of candidates measured per search iteration
FAILED_S = 1e9  # run seconds at or above this are a failed candidate's placeholder (MetaSchedule's 1e10)
_INTRINSICS = {"cuda": ("cuda",), "rocm": ("rocm",), "llvm": ("x86", "arm_cpu", "riscv_cpu")}
_ROOT = str(Path(__file__).resolve().parent.parent)


def _register_intrinsics(kind: str) -> None:
    """Register the tensor intrinsics of target `kind` only, and mark their package as imported."""
    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        package = importlib.util.module_from_spec(importlib.util.find_spec(name))
        sys.modules[name] = package
        setattr(sys.modules["tvm.s_tir"], "tensor_intrin", package)
    for module in _INTRINSICS[kind]:
        importlib.import_module(f"{name}.{module}")


PIPELINES = ("stock", "suite")
"""How MetaSchedule's best schedules are compiled for the suite to time: TVM's default TIR pipeline, as its
own builder compiles every candidate, and the suite's (trial/build.py: LowerWarpMemory until no warp
buffer is left, which TVM's mma intrinsics use); its figure is the faster."""


def pass_config(target: Any) -> dict[str, Any]:
    """What a CUDA user sets for MetaSchedule's kernels (TVM leaves both off): copies into shared memory
    lowered to cp.async on sm_80+, and static shared memory merged into one dynamic allocation, so that a
    kernel may use the device's opt-in shared memory beyond 48 KB (`_ms_target` gives its rules that limit;
    TVM's CUDA runtime raises a kernel's limit at launch)."""
    if target.kind.name != "cuda":
        return {}
    arch = str(target.attrs.get("arch", ""))
    sm = int(arch.removeprefix("sm_").rstrip("a")) if arch.startswith("sm_") else 0
    return {"tirx.use_async_copy": sm >= 80, "tirx.merge_static_smem": True}


def _compile(mod: Any, target: Any, pipeline: str = "stock") -> Any:
    """A schedule's module compiled for `target` through `pipeline` (`PIPELINES`), in the target's scope so
    that TVM's CUDA compile callback takes its arch from it, not from a GPU (a build worker sees none)."""
    import tvm
    from tvm.driver import build as runtime_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from trial import build as suite

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    config = pass_config(target)
    if pipeline == "suite":
        config.update(suite.pass_config(config.get("tirx.use_async_copy", False)))
    with tvm.transform.PassContext(config=config), target:
        if pipeline == "suite":
            return runtime_build(mod, target=target, pipeline=suite.PIPELINE)
        return runtime_build(mod, target=target)


def build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build function (TVM's pipeline) with `pass_config`, without its import of every
    target's tensor intrinsics."""
    return _compile(mod, target)


def _ms_target(target: Any) -> Any:
    """The suite's target with what MetaSchedule's rules read: the device's limits (the shared memory a block
    may opt into, which `pass_config` lets its kernels use), or the core count."""
    import tvm
    from tvm.s_tir.meta_schedule.utils import cpu_count

    config = dict(target.target)
    if target.is_gpu:
        lim = target.limits
        config.update(max_threads_per_block=lim.max_threads_per_block, thread_warp_size=lim.warp_size,
                      max_shared_memory_per_block=lim.shared_memory_per_block,
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


def _libraries(schedules: list[Any], ms_target: Any, work_dir: str) -> list[dict[str, Any]]:
    """Compile each of the best schedules through each of `PIPELINES` into a library of `work_dir`
    (best-0-stock.so first), for the suite's run path to verify and time; each one's answer as a build's
    ("built" with its path and pipeline, or why not)."""
    if not schedules:
        return [{"status": Status.INVALID, "reason": "MetaSchedule found no valid schedule"}]
    out = []
    for rank, sch in enumerate(schedules):
        for pipeline in PIPELINES:
            library = Path(work_dir) / f"best-{rank}-{pipeline}.so"
            start = time.perf_counter()
            try:
                _compile(sch.mod, ms_target, pipeline).export_library(str(library))
            except Exception as err:  # the schedule fails to compile outside MetaSchedule's builder
                out.append({"status": Status.COMPILE_ERROR, "reason": f"{pipeline} pipeline: {error_reason(err)}"})
                continue
            out.append({"status": "built", "library": str(library), "build_s": time.perf_counter() - start,
                        "extra": {"trace": str(sch.trace), "pipeline": pipeline}})
    return out


def _best(database: Any, count: int) -> list[Any]:
    """The `count` fastest schedules measured (the database holds this run's one workload), rebuilt as
    `compile_tir` rebuilds its best one: the record's trace applied to the workload's module.  A failed
    candidate's run seconds are MetaSchedule's 1e10 placeholder."""
    from tvm.s_tir import Schedule

    timed = []
    for i, record in enumerate(database.get_all_tuning_records()):
        secs = [float(s) for s in record.run_secs or []]
        if secs and max(secs) < FAILED_S:
            timed.append((statistics.fmean(secs), i, record))
    schedules = []
    for _, _, record in sorted(timed)[:count]:
        sch = Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        schedules.append(sch)
    return schedules


def child(conn: Any, op: str, spec: str, trials: int, seed: int, options: Options, work_dir: str,
          search: dict[str, Any], finalists: int, share: tuple[str, tuple[int, ...], int] | None = None) -> None:
    """The run in its own process: tune, then send the `finalists` best schedules' libraries ("final").

    `share` (benchmarks/placement.py): the GPUs it sees, the logical CPUs it and its builder's workers run
    on and how many physical cores those are (its search's threads), set before TVM loads."""
    os.dup2(2, 1)
    if share:
        os.environ.update(dict.fromkeys(DEVICE_VARIABLES[:2], share[0]))
        os.sched_setaffinity(0, share[1])
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
        conn.send(("final", [{"status": Status.INVALID, "reason": str(err)}]))
        return
    _register_intrinsics(target.kind)
    ms_target = _ms_target(target)
    conn.send(("target", {"target": target.label, "device": target.device_name}))
    TimedBuilder, ServiceRunner, Report = _classes()
    builder = TimedBuilder(ms.builder.LocalBuilder(f_build=build, timeout_sec=options.build_timeout_s,
                                                   max_workers=len(share[1]) if share else None))
    runner = ServiceRunner(wl, options)
    func = templates.load(wl, options.template).prim_func(wl)
    conn.send(("setup", time.perf_counter() - start))
    try:
        database = ms.tune_tir(func, ms_target, work_dir, max_trials_global=trials,
                               num_trials_per_iter=min(TRIALS_PER_ITER, trials), builder=builder, runner=runner,
                               num_tuning_cores=share[2] if share else "physical",
                               space=_space(wl, target, ms), strategy=ms.search_strategy.EvolutionarySearch(**search),
                               measure_callbacks=[Report(conn, wl.flops, builder, runner),
                                                  *ms.measure_callback.MeasureCallback.create("default")],
                               seed=seed)
        best = _best(database, finalists)
    except Exception as err:  # MetaSchedule itself failed: the run ends with what it measured
        conn.send(("final", [{"status": Status.RUNTIME_ERROR, "reason": f"MetaSchedule failed: {error_reason(err)}"}]))
        return
    conn.send(("tuned", None))
    conn.send(("final", _libraries(best, ms_target, work_dir)))

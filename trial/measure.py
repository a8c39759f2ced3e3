"""Measure one knob configuration: check, build, run, verify and time it in a child process.

The supervising process never touches a GPU; the child does, and reports each stage it reaches
over a pipe, so the parent can apply the build timeout, wait (without a deadline) while another
trial holds the device, apply the run timeout, and turn a crash of the child into a status.
Knobs outside the space or beyond the device's limits (as an earlier child on this machine
recorded them, see target.save) are rejected before any child starts: on a GPU machine starting
one costs seconds, and most of a factor space is invalid.
Statuses: ok, invalid, compile_error, runtime_error, timeout, wrong_result.
Children fork from a server process that imported TVM once (multiprocessing's forkserver), so a process
that measures many configurations (the benchmark driver) pays TVM's import once, not per trial, while
each measurement still runs, and may crash or hang, in a process of its own.
The nnictl trial and the benchmarks share this one path.  Where the time of a measurement went is
kept in `MeasureResult.extra["stages"]` (see `STAGES`).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .workload import Workload

STATUSES = ("ok", "invalid", "compile_error", "runtime_error", "timeout", "wrong_result")
_STAGE_AFTER = {"start": "startup", "imported": "setup", "target": "build", "built": "lock_wait",
                "running": "run", "result": "exit"}
STAGES = tuple(_STAGE_AFTER.values())
"""Seconds of one measurement, in order: process start-up and imports; target and device query; knob
check, compilation and the reference outputs; waiting for the device lock; verification and timing;
the child's exit.  Each is the time between two messages of the child as the parent sees them, so
they add up to the whole call; a stage the measurement never reached is missing."""
_REASON_CHARS = 600
_PRELOAD = ["tvm", "trial.build", "trial.run", "trial.verify", "trial.templates.matmul", "trial.templates.conv2d"]


@dataclass(frozen=True)
class Options:
    target: str = "auto"
    build_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    repeat: int = 5
    min_repeat_ms: int = 40
    seed: int = 0
    template: str | None = None  # "module[:attr]" replacing the op's template (see templates.load)


@dataclass
class MeasureResult:
    status: str
    reason: str = ""
    params: dict[str, Any] | None = None
    gflops: float = 0.0
    latency_ms: float | None = None
    latency_std_ms: float | None = None
    build_s: float | None = None
    target: str = ""
    device: str = ""  # the device's model name
    device_index: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def report(self, parameter_id: Any = None) -> dict[str, Any]:
        """The metric dict a trial reports to NNI ("default" is what tuners optimise)."""
        out = {"default": self.gflops,
               **{k: v for k, v in asdict(self).items() if k not in ("extra", "device_index")}}
        if self.device_index is not None:
            out["device"] = f"{self.device} (device {self.device_index})"
        # NNI 3.0's dispatcher parses metrics with json_tricks, whose comment stripping breaks on
        # '#' inside nested strings (the metric is then lost): text carries a look-alike instead.
        for key in ("reason", "target", "device"):
            out[key] = out[key].replace("#", "\uff03")
        out["parameter_id"] = parameter_id
        return out


def error_reason(err: BaseException) -> str:
    """The informative tail of an exception: TVM errors carry long C++ tracebacks first."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("File ", "Traceback", "^"))]
    text = " | ".join(lines[-4:]) or type(err).__name__
    text = f"{type(err).__name__}: {text}"
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def _child(conn, env: dict[str, str], cwd: str, op: str, spec: str, params: dict[str, Any] | None,
           options: Options) -> None:
    os.dup2(2, 1)  # keep the parent's stdout for its one JSON line
    os.environ.clear()  # the fork server's environment and folder are those of when it started
    os.environ.update(env)
    os.chdir(cwd)
    from tuners.space import from_twin

    from . import build, check, run, templates, verify
    from .target import TargetError, resolve, save
    from .workload import parse

    conn.send(("imported", None))

    def finish(status: str, reason: str = "", **metrics: Any) -> None:
        conn.send(("result", {"status": status, "reason": reason, **metrics}))

    wl = parse(op, spec)
    template = templates.load(op, options.template)
    try:
        target = resolve(options.target)
    except TargetError as err:
        return finish("invalid", str(err))
    save(options.target, target)
    if params is None:
        params = template.default_params(wl, target.is_gpu)
    else:  # NNI's built-in tuners search the standard-type twin of the space
        params = from_twin(template.search_space(wl), params)
    conn.send(("target", {"target": target.label, "device": target.device_name, "params": params}))
    try:
        check.check(wl, template, params, target)
    except check.InvalidConfig as err:
        return finish("invalid", str(err))
    start = time.perf_counter()
    try:
        lib = build.build(wl, template, params, target)
    except Exception as err:  # any failure to schedule or compile is this config's compile error
        return finish("compile_error", error_reason(err))
    compiled = time.perf_counter() - start
    reference = verify.Reference.of(wl, options.seed)
    conn.send(("built", compiled))
    finish(**run.on_device(lib.mod, target, reference, options.repeat, options.min_repeat_ms,
                           lambda index: conn.send(("running", index))))


def _stop(proc: mp.process.BaseProcess) -> None:
    proc.kill()
    proc.join(5)


def _death(proc: mp.process.BaseProcess) -> str:
    proc.join(5)
    code = proc.exitcode
    if code is not None and code < 0:
        return f"measuring process killed by {signal.Signals(-code).name}"
    return f"measuring process exited with code {code} before reporting"


def _precheck(wl: Workload, params: dict[str, Any] | None, options: Options) -> MeasureResult | None:
    """An `invalid` result if the knobs are bad for the device an earlier child found here, else None."""
    from . import check, target, templates
    from tuners.space import from_twin

    known = target.load(options.target)
    if params is None or known is None:
        return None
    template = templates.load(wl.op, options.template)
    params = from_twin(template.search_space(wl), params)
    try:
        check.check(wl, template, params, known)
    except check.InvalidConfig as err:
        return MeasureResult("invalid", str(err), params, target=known.label, device=known.device_name)
    return None


def _main_module() -> list[str]:
    """The module run by `python -m name`, which each child runs again before measuring: the server
    imports it first so that the child finds its imports done.  `pkg.__main__` modules are not run
    again (nor imported here: importing one runs its program)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return [spec.name] if spec and not spec.name.endswith("__main__") else []


def measure(wl: Workload, params: dict[str, Any] | None, options: Options = Options()) -> MeasureResult:
    """Measure `params` (None: the template's hand-picked config) for `wl`; never raises for a bad config."""
    rejected = _precheck(wl, params, options)
    if rejected:
        return rejected
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD + _main_module())
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sender, dict(os.environ), os.getcwd(), wl.op, wl.spec, params, options),
                       daemon=True)
    proc.start()
    sender.close()
    result = MeasureResult("runtime_error", params=params)
    marks = [("start", time.perf_counter())]
    stage, deadline = "build", time.monotonic() + options.build_timeout_s
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not receiver.poll(wait):
                _stop(proc)
                limit = options.build_timeout_s if stage == "build" else options.run_timeout_s
                result.status = "timeout"
                result.reason = f"{'build' if stage == 'build' else 'kernel run'} exceeded {limit:g} s; killed"
                return result
            try:
                kind, payload = receiver.recv()
                marks.append((kind, time.perf_counter()))
            except EOFError:
                result.status = "compile_error" if stage == "build" else "runtime_error"
                result.reason = f"{_death(proc)} during {stage}"
                return result
            if kind == "imported":
                continue
            if kind == "target":
                for key, value in payload.items():
                    setattr(result, key, value)
            elif kind == "built":
                result.build_s, stage, deadline = payload, "lock", None
            elif kind == "running":
                result.device_index, stage = payload, "run"
                deadline = time.monotonic() + options.run_timeout_s
            else:
                for key, value in payload.items():
                    setattr(result, key, value)
                return result
    finally:
        receiver.close()
        if proc.is_alive():
            proc.join(10)
            if proc.is_alive():
                _stop(proc)
        marks.append(("end", time.perf_counter()))
        result.extra = {**result.extra, "stages": _stages(marks)}


def _stages(marks: list[tuple[str, float]]) -> dict[str, float]:
    """Seconds per stage (see STAGES) from the parent's arrival times of the child's messages."""
    return {_STAGE_AFTER[kind]: later - at for (kind, at), (_, later) in zip(marks, marks[1:])}

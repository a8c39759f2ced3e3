"""One run of the benchmark protocol: a seeded driver run, its best configs re-timed; the vendor and the peer.

A tuner's best trial is the luckiest of many timings, so the protocol re-measures each run's RETIMED
best distinct `ok` configurations through the same measure path and options, and takes the best of those
as the run's result.  MetaSchedule (`benchmarks.metaschedule`) searches its own space instead of the
suite's knobs: its RETIMED fastest schedules are compiled and timed the same way.  The vendor library
(cuBLAS/cuDNN through PyTorch, `trial.vendor.baseline`) is a record of its own per workload (`vendor`),
timed alone after the runs (`benchmarks.protocol_jobs`); records of runs written before have a "vendor"
timed right after each run, and the report reads those too (`protocol_report.vendor_of`).

A run's record is one JSON file (`path`), written whole under a temporary name and renamed (`save`), so
that a protocol killed mid-run leaves no partial file and its next invocation runs only what is missing.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments import registry
from trial import templates
from trial.measure import Options, measure
from trial.records import Records
from trial.results import MeasureResult, Status
from trial.target import Target
from trial.vendor import baseline
from trial.workload import Workload

from . import driver, metaschedule
from .metaschedule_child import TRIALS_PER_ITER
from .placement import Share
from .protocol_report import versions
from .stats import time_to_fraction

PEER = "torch.compile max-autotune"
COMPILE_MODE = "max-autotune-no-cudagraphs"
"""Inductor's autotuning of "max-autotune" without its own CUDA graphs: the call is replayed from a CUDA
graph when timed (trial/vendor.py), as the vendor's and the suite's kernels are."""
RETIMED = 3
FRACTION = 0.95
"""Time to quality: trials and seconds until a run first reached this fraction of its own best."""


def path(out: Path, wl: Workload, tuner: str, seed: int, trials: int, workers: int) -> Path:
    """Where the record of one run lives: one folder per workload, the budget and seed in the name (a label's
    arguments, `metaschedule[a=1]`, spelled with plain characters)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", tuner).strip("_")
    return out / wl.op / wl.key.split("/", 1)[1] / f"{name}-t{trials}-w{workers}-s{seed}.json"


def peer_path(out: Path, wl: Workload) -> Path:
    """Where the record of the peer's run on `wl` lives, beside the tuners' runs."""
    return out / wl.op / wl.key.split("/", 1)[1] / "torch-compile.json"


def stamp(options: Options) -> dict[str, Any]:
    """What every record says of how and when it was measured: the options, the versions, the time (UTC)."""
    return {"options": asdict(options), "versions": versions(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def vendor_path(out: Path, wl: Workload) -> Path:
    """Where the record of the vendor library timed alone on `wl` lives, beside the tuners' runs."""
    return out / wl.op / wl.key.split("/", 1)[1] / "vendor.json"


def searched_alike(wl: Workload, library: dict[str, Any] | None) -> bool:
    """Whether a vendor figure on `wl` (None: none) was timed as the vendor is now: a convolution's is the
    fastest of several cuDNN algorithm searches (its "searches", `trial.vendor.fastest_search`), where a record
    from before was one search's pick, and is timed again."""
    return library is None or wl.op != "conv" or "searches" in library


def peer_searched_alike(wl: Workload, record: dict[str, Any]) -> bool:
    """Whether a peer record on `wl` stands: its compiled call's figure (where compiling did not fail) and the
    library figure its ratio divides by were both timed as they are now (`searched_alike`)."""
    return searched_alike(wl, None if "error" in record else record) and searched_alike(wl, record.get("vendor"))


def vendor(wl: Workload, model: str, target: Any, options: Options) -> dict[str, Any] | None:
    """The vendor library on `wl` (`trial.vendor.baseline`: its fastest documented path, from a CUDA graph, its
    output checked): the workload's vendor record, None where there is no figure (no CUDA, no PyTorch)."""
    library = baseline(wl, target, options.repeat, options.min_repeat_ms)
    if library is None:
        return None
    return {"workload": wl.name, "key": wl.key, "model": model, **library, **stamp(options)}


def peer(wl: Workload, model: str, target: Any, options: Options) -> dict[str, Any] | None:
    """`torch.compile` at its best mode (`COMPILE_MODE`) on the vendor's call on `wl`, its output checked, the
    vendor timed right after it: the peer's record; None where there is no figure (no CUDA, no PyTorch).
    A compilation that fails is a record too (its "error"), not a figure."""
    try:
        compiled = baseline(wl, target, options.repeat, options.min_repeat_ms, compile_mode=COMPILE_MODE)
    except Exception as err:  # noqa: BLE001 - Inductor's failure on this workload is the peer's result
        compiled = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    if compiled is None:
        return None
    library = baseline(wl, target, options.repeat, options.min_repeat_ms) if "error" not in compiled else None
    return {"workload": wl.name, "key": wl.key, "model": model, "peer": PEER, "mode": COMPILE_MODE, **compiled,
            "vendor": library, "ratio": compiled["gflops"] / library["gflops"] if library else None,
            **stamp(options)}


def save(target: Path, record: dict[str, Any]) -> None:
    """Write `record` as `target` atomically: a reader (or a resumed protocol) sees all of it or nothing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load(target: Path) -> dict[str, Any] | None:
    """The record at `target`, or None where there is none (or it cannot be read: it will be run again)."""
    try:
        return json.loads(target.read_text())
    except (OSError, ValueError):
        return None


def _short(template: Any) -> str:
    """A template module's last name, as records keep it ("simt" for trial.templates.simt)."""
    return template.__name__.rsplit(".", 1)[-1]


def template_of(wl: Workload, params: dict[str, Any] | None) -> str | None:
    """The template whose knobs `params` are, None without params."""
    return None if params is None else _short(templates.load(wl, params=params))


def recorded_template(wl: Workload, record: dict[str, Any]) -> str | None:
    """The template of a record's best config: as the record names it, else (written before records named it) as
    its best config's knobs say; None where it has none (MetaSchedule's own space, or no kernel found)."""
    return record.get("template") or template_of(wl, record.get("best_params"))


def picked_template(wl: Workload, target: Target) -> str:
    """The template the suite picks for `wl` on `target` now."""
    return _short(templates.load(wl, target=target))


def recorded_target(record: dict[str, Any]) -> Target | None:
    """The target a record's run measured on, as far as picking a template needs it: the kind and architecture
    its label names ("cuda sm_90"), without the device's limits; None where the record names none."""
    kind, _, arch = (record.get("target") or "").partition(" ")
    if not kind:
        return None
    return Target(kind, {"kind": kind, "mcpu" if kind == "llvm" else "arch": arch}, record.get("device", ""), 1, None)


def space_of(wl: Workload, template: str) -> str:
    """A fingerprint of the knobs and values `template` ("simt") searches on `wl`: a record keeps its own, so that
    a record of a space since changed (a knob or a value added for its shape) runs again."""
    module = templates.load(wl, name=f"{templates.__name__}.{template}")
    text = json.dumps(module.search_space(wl), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def best_distinct(run: driver.Run, count: int = RETIMED) -> list[MeasureResult]:
    """The run's `count` fastest `ok` results with distinct configurations, fastest first."""
    ranked = sorted((t.result for t in run.trials if t.result.status == Status.OK and t.result.params),
                    key=lambda r: r.gflops, reverse=True)
    seen: dict[str, MeasureResult] = {}
    for result in ranked:
        seen.setdefault(json.dumps(result.params, sort_keys=True), result)
        if len(seen) == count:
            break
    return list(seen.values())


def _row(timed: MeasureResult, params: dict[str, Any] | None, search_gflops: float | None,
         target: str = "") -> dict[str, Any]:
    return {"params": params, "search_gflops": search_gflops, "status": str(timed.status),
            "gflops": timed.gflops if timed.status == Status.OK else 0.0, "latency_ms": timed.latency_ms,
            "target": timed.target or target, "warning": timed.warning, "reason": timed.reason[:300]}


def _tuned(wl: Workload, tuner: str, trials: int, seed: int, workers: int, options: Options,
           records: Records | None, progress: bool, share: Share | None) -> tuple[driver.Run, list[dict[str, Any]]]:
    """The run and its best re-timed: a driver run's RETIMED best distinct configs measured again, or
    MetaSchedule's RETIMED fastest schedules compiled (through TVM's pipeline and the suite's) and timed,
    each row with its pipeline and its schedule's trace."""
    if metaschedule.is_label(tuner):
        with tempfile.TemporaryDirectory(prefix="opevo-metaschedule-") as work:
            run = metaschedule.run(wl, trials, seed, work, options, progress, tuner, RETIMED, share)
        return run, [{**_row(f, None, None), "pipeline": f.extra.get("pipeline"), "trace": f.extra.get("trace")}
                     for f in run.finalists]
    run = driver.run(wl, tuner, trials, seed, workers, options, records, progress)
    return run, [_row(measure(wl, found.params, options), found.params, found.gflops, found.target)
                 for found in best_distinct(run)]


def class_args(tuner: str, workers: int) -> dict[str, Any]:
    """The frozen classArgs of `tuner`, as an experiment with `workers` trials in flight gives them (the seed
    is the run's); MetaSchedule's: its search's arguments (`metaschedule.strategy`) and batch size."""
    if metaschedule.is_label(tuner):
        return {"search": metaschedule.strategy(tuner), "num_trials_per_iter": TRIALS_PER_ITER}
    if tuner in registry.BUILTIN_TUNERS:
        return dict(registry.BUILTIN_TUNERS[tuner].get("classArgs", {}))
    return registry.class_args(tuner, workers)


def one(wl: Workload, model: str, tuner: str, seed: int, trials: int, workers: int, options: Options,
        records: Records | None = None, progress: bool = True, share: Share | None = None) -> dict[str, Any]:
    """Run `tuner` on `wl` with `seed` and re-time its best configs: the run's record (with `share`, a
    MetaSchedule run's part of the host: benchmarks/placement.py).  Its ratio to the vendor is the report's
    (`protocol_report.with_ratio`), from the workload's `vendor` record."""
    run, retimed = _tuned(wl, tuner, trials, seed, workers, options, records, progress, share)
    top = max(retimed, key=lambda r: r["gflops"], default=None)
    best = top["gflops"] if top else 0.0
    where = top["target"] if top else next((t.result.target for t in run.trials if t.result.target), "")
    to_trials, to_seconds = time_to_fraction(run.trials, FRACTION)
    template = template_of(wl, top["params"] if best > 0 else None)  # None: no kernel, or MetaSchedule's own space
    return {
        "workload": wl.name, "key": wl.key, "model": model, "tuner": tuner, "seed": seed,
        "class_args": class_args(tuner, workers), "budget": trials, "workers": workers,
        "device": next((t.result.device for t in run.trials if t.result.device), ""), "target": where,
        "trials": len(run.trials), "rejected": run.rejected, "ended": run.ended, "wall_s": run.wall_s,
        "tuner_s": run.tuner_s,
        "experiment": run.experiment, "search_best_gflops": run.curve[-1] if run.curve else 0.0,
        "retimed": retimed, "best_gflops": best, "best_params": top["params"] if best > 0 else None,
        "template": template, **({"space": space_of(wl, template)} if template else {}),
        "to_fraction": {"fraction": FRACTION, "trials": to_trials, "seconds": to_seconds},
        "curve": [[t.index, round(t.finished_s, 3), str(t.result.status), t.result.gflops] for t in run.trials],
        **stamp(options),
        **({"share": share.describe()} if share else {}),
    }

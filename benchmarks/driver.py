"""In-process driver: a tuner through NNI's Tuner API and the trial's measure path, without NNI's manager.

A benchmark needs many seeded runs of several tuners, in one process without NNI's manager (a Node
server, a dispatcher process, a trial process per trial that imports NNI), while measuring exactly
what an nnictl experiment measures.  So the tuner classes and their classArgs are the experiments'
(`experiments.registry.TUNERS`, `experiments.registry.BUILTIN_TUNERS`; but no warm start from the records, so that runs
are independent), each trial is `trial.measure.measure` (the measuring service's build workers and
device runners, as for nnictl trials), and `drive` plays NNI 3.0's dispatcher and manager
(nni/runtime/msg_dispatcher.py, nni_node/core/nnimanager.js) call for call:

* `update_search_space` first; then a request for `workers` parameters (the trial concurrency);
* each request takes fresh parameter ids and calls `generate_multiple_parameters(ids, st_callback=...)`;
  the answered prefix becomes trial jobs and the rest may come later through the callback, which, as in
  NNI, appends a trial job whenever the tuner calls it;
* a trial gets its parameters as JSON; its result goes back as `receive_trial_result(id, parameters as
  the tuner proposed them, the trial's report dict)`, then `trial_end(id, True)` (a trial reports
  failures as results and exits 0), then one new request per ended trial while the budget lasts;
* the run ends when the budget is submitted and done, or when nothing runs and nothing waits: the tuner
  answered short (NNI's "no more trials", `NoMoreTrialError`) and has nothing left to send.

NNI's built-in tuners search the standard-type twin of the space (`searchspace.twin_space`); their
parameters go to `measure` as they are and the trial decodes them (`from_twin`), as under nnictl.  The
twin's types cannot say which combinations of values break the device's rules, so those tuners propose
kernels that cannot run (on some templates, most of NNI Random's proposals): such a proposal goes back to
the tuner as the failed trial it is but does not count against the budget (the run's `rejected`), so
that every tuner is compared on as many kernels that run, up to REJECTED_PER_TRIAL rejections a trial of
the budget.
"""
from __future__ import annotations

import importlib
import json
import random
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from nni.algorithms.hpo.evolution_tuner import EvolutionTuner
from nni.tuner import Tuner

from experiments import registry
from experiments.dispatcher import Dispatcher
from searchspace import ConstrainedSpace, SearchSpace, twin_space
from trial import templates
from trial.constraints import KernelRules
from trial.measure import Options, device, measure
from trial.records import Records
from trial.results import MeasureResult, Status
from trial.target import Target
from trial.workload import Workload

from experiments.plots import best_so_far


class SeededEvolutionTuner(EvolutionTuner):
    """NNI's Evolution tuner, seeded: it draws from an unseeded RandomState and the `random` module.

    `random` is the whole process's generator, so Evolution runs at the same time (compare --parallel)
    are not reproducible.
    """

    def __init__(self, seed: int, **class_args: Any) -> None:
        super().__init__(**class_args)
        self.seed = seed

    def update_search_space(self, search_space: dict[str, Any]) -> None:
        random.seed(self.seed)
        super().update_search_space(search_space)
        self.random_state = np.random.RandomState(self.seed)
        self.population = []
        for _ in range(self.population_size):
            self._random_generate_individual()


REJECTED_PER_TRIAL = 20
"""A run ends ("rejected") once its tuner proposed this many kernels that break the rules per trial of its budget."""

_BUILTIN_CLASSES = {"Random": "nni.algorithms.hpo.random_tuner.RandomTuner",
                    "Evolution": "benchmarks.driver.SeededEvolutionTuner"}
"""The classes behind the NNI built-in `name`s in `experiments.registry.BUILTIN_TUNERS` (the seeded Evolution in
place of NNI's); entries there with a `className` (TPE: `tuners.tpe.TPETuner`) name their class."""

TUNERS = (*registry.TUNERS, *registry.BUILTIN_TUNERS)
"""Tuners the driver runs: the suite's on its space, NNI's built-ins on the twin space."""


_VARIANT = re.compile(r"(?P<name>[a-z0-9_]+)(?:\[(?P<args>[^\[\]]*)\])?")


def variant(label: str, known: tuple[str, ...] = TUNERS) -> tuple[str, dict[str, Any]]:
    """The tuner (one of `known`) and the classArgs that replace the experiments' in a label such as
    `opevo[mutate_rate=0.3,parents_size=4]` (values are JSON, or else strings); ValueError if malformed."""
    found = _VARIANT.fullmatch(label)
    if not found or found["name"] not in known:
        raise ValueError(f"unknown tuner {label!r}: expected one of {', '.join(known)}, optionally with "
                         "classArgs, e.g. opevo[mutate_rate=0.3]")
    overrides = {}
    for item in filter(None, (found["args"] or "").split(",")):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not key.isidentifier():
            raise ValueError(f"bad classArg {item!r} in {label!r}: expected name=value")
        try:
            overrides[key] = json.loads(value)
        except ValueError:
            overrides[key] = value
    return found["name"], overrides


def tuner_spec(name: str) -> dict[str, Any]:
    """The experiments' entry for tuner `name` (experiments.registry): its class and frozen classArgs."""
    return registry.BUILTIN_TUNERS[name] if name in registry.BUILTIN_TUNERS else registry.TUNERS[name]


def make_tuner(label: str, seed: int, wl: Workload | None = None, target: Target | None = None,
               concurrency: int = registry.CONCURRENCY) -> tuple[Tuner, bool]:
    """The tuner of `label` (a name, or a variant: see `variant`) with the classArgs an experiment of
    `concurrency` trials in flight gives it (`registry.class_args`) and `seed`, keeping `target`'s rules for
    `wl` (the suite's tuners); and whether it searches the twin space."""
    name, overrides = variant(label)
    twin = name in registry.BUILTIN_TUNERS
    spec = tuner_spec(name)
    frozen = spec.get("classArgs", {}) if twin else registry.class_args(name, concurrency)
    class_args = {**frozen, **overrides, "seed": seed}
    if not twin and wl is not None and target is not None:
        class_args.update(workload=wl.name, target=target.describe())
    module, _, cls = (spec.get("className") or _BUILTIN_CLASSES[spec["name"]]).rpartition(".")
    try:
        return getattr(importlib.import_module(module), cls)(**class_args), twin
    except TypeError as err:  # a classArg the tuner does not take
        raise ValueError(f"{label}: {err}") from None


@dataclass
class Trial:
    """One measurement of a run."""

    index: int  # 1-based, in the order the results arrived (the order the tuner learnt them)
    parameter_id: int | None
    result: MeasureResult
    finished_s: float  # seconds from the start of the run to this result
    seconds: float  # the measurement's own duration


@dataclass
class Run:
    """One tuner's run on one workload with one seed."""

    tuner: str
    seed: int
    trials: list[Trial] = field(default_factory=list)
    wall_s: float = 0.0
    tuner_s: float = 0.0  # time spent inside the tuner's methods (MetaSchedule: its search and cost model)
    setup_s: float = 0.0  # one-off start-up before the first trial (MetaSchedule's process and imports)
    workers: int = 1  # trials measured at once (the trial concurrency; MetaSchedule: 1)
    ended: str = ""  # "budget", "no more trials" when the tuner ran out first, or "rejected" (REJECTED_PER_TRIAL)
    rejected: int = 0  # proposals that break the device's rules: answered, not counted (`drive`)
    final: MeasureResult | None = None  # MetaSchedule: its best schedule timed through the suite's run path
    finalists: list[MeasureResult] = field(default_factory=list)  # MetaSchedule: its top schedules, each timed so
    experiment: str | None = None  # the records' experiment name

    @cached_property
    def curve(self) -> list[float]:
        """Best GFLOPS so far after each trial (failed trials count as 0); computed once, so read it when
        the run is complete."""
        return best_so_far([t.result.gflops if t.result.status == "ok" else 0.0 for t in self.trials])


Evaluate = Callable[[dict[str, Any]], MeasureResult]


def _timed(evaluate: Evaluate, params: dict[str, Any]) -> tuple[MeasureResult, float]:
    start = time.perf_counter()
    result = evaluate(params)
    return result, time.perf_counter() - start


def drive(tuner: Tuner, search_space: dict[str, Any], trials: int, workers: int, evaluate: Evaluate,
          on_trial: Callable[[Trial], None] | None = None) -> Run:
    """Run `tuner` on `search_space` for up to `trials` trials, `workers` at a time, as NNI would; a
    proposal that breaks the device's rules (status `invalid`) is answered but not counted (`Run.rejected`).

    `evaluate` measures one configuration (given as the trial receives it) in a worker thread; the
    tuner is only ever called from this thread.  Returns the run with tuner and seed left blank.
    """
    if trials < 1 or workers < 1:
        raise ValueError(f"trials and workers must be positive, got {trials} and {workers}")
    run = Run(tuner=type(tuner).__name__, seed=-1, workers=workers)
    start = time.perf_counter()
    nni_side = Dispatcher(tuner)
    running: dict[Future, int] = {}

    def more() -> bool:  # the budget is not yet measured or under way, and the tuner may still propose
        return len(run.trials) + len(running) < trials and run.rejected < REJECTED_PER_TRIAL * trials

    nni_side.start(search_space)
    nni_side.request(workers)
    with ThreadPoolExecutor(workers, thread_name_prefix="trial") as pool:
        while True:
            while len(running) < workers and more() and (job := nni_side.next_job()):
                parameter_id, params = job
                running[pool.submit(_timed, evaluate, params)] = parameter_id
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=running.__getitem__):
                parameter_id = running.pop(future)
                result, seconds = future.result()
                nni_side.finish(parameter_id, result.report(parameter_id))
                if result.status == Status.INVALID:
                    run.rejected += 1
                    continue
                trial = Trial(len(run.trials) + 1, parameter_id, result, time.perf_counter() - start, seconds)
                run.trials.append(trial)
                if on_trial:
                    on_trial(trial)
            if more():
                nni_side.request(len(done))
    run.tuner_s = nni_side.tuner_s
    run.wall_s = time.perf_counter() - start
    run.ended = ("budget" if len(run.trials) >= trials else
                 "rejected" if run.rejected >= REJECTED_PER_TRIAL * trials else "no more trials")
    return run


class Progress:
    """A tqdm bar over one run's trials that shows the best GFLOPS so far."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=label, unit="trial", disable=not enabled, dynamic_ncols=True)
        self.best = 0.0

    def add(self, result: MeasureResult) -> None:
        if result.status == "ok":
            self.best = max(self.best, result.gflops)
        self.bar.set_postfix_str(f"best {self.best:.1f} GFLOPS", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def run(wl: Workload, tuner: str, trials: int, seed: int, workers: int = registry.CONCURRENCY,
        options: Options = Options(), records: Records | None = None, progress: bool = True,
        evaluate: Evaluate | None = None, target: Target | None = None) -> Run:
    """One seeded run of `tuner` on `wl` through the measure path; each measurement goes to `records`.

    The suite's tuners keep the rules of `target` (default: the device the trials run on), and NNI's
    built-ins get the twin space restricted to the values those rules leave possible, as the experiment
    writer gives them; a replaced template (`options.template`, tests) has no rules.  `evaluate` replaces
    `measure(wl, params, options)` (tests, `benchmarks.replay`).
    """
    if target is None and not options.template:
        target = device(options.target, options.runner)
    template = templates.load(wl, options.template, target)
    instance, twin = make_tuner(tuner, seed, wl, target, workers)
    native = template.search_space(wl)
    allowed = None if target is None else ConstrainedSpace.of(
        SearchSpace.from_json(native), KernelRules(wl, template, target)).domains()
    experiment = f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}-{tuner}-s{seed}"
    bar = Progress(trials, f"{tuner} seed {seed}", progress)

    def on_trial(trial: Trial) -> None:
        if records is not None:
            records.append(wl, trial.result, experiment=experiment, trial=str(trial.parameter_id), tuner=tuner)
        bar.add(trial.result)

    try:
        done = drive(instance, twin_space(native, allowed) if twin else native, trials, workers,
                     evaluate or (lambda params: measure(wl, params, options)), on_trial)
    finally:
        bar.close()
    done.tuner, done.seed, done.experiment = tuner, seed, experiment if records is not None else None
    return done

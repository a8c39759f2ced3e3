"""NNI plumbing shared by the suite's tuners: bookkeeping, dedup, queued requests, failures and resume.

A subclass implements `propose()` (and, if it learns incrementally, `observe()`); `SpaceTuner` turns that
into the NNI 3.0 tuner protocol, whose pitfalls it handles once for every algorithm:

* NNI asks for N parameters and never asks again for the ones it did not get, so a request the algorithm
  cannot answer yet is queued and answered later through the `st_callback` NNI passes to
  `generate_multiple_parameters` (`st_callback(parameter_id, parameters)` sends a new trial job).
* Results are paired with configurations by parameter id only. NNI 3.0's local training service can hand
  a trial another trial's parameters (microsoft/nni#5693, #5726), so the same id may report twice and
  `trial_end` ids are unreliable; a metric may also arrive after its `trial_end`.
* `trial_end` runs on NNI's assessor thread while results and requests arrive on the main command
  thread, so all state is guarded by one lock.
* NNI 3.0 never calls `save_checkpoint`, so the state is written to `NNI_CHECKPOINT_DIRECTORY` after
  every change and read back by `update_search_space`; `import_data` feeds in earlier results on resume.

Warm start (classArg `warm_start`): the best verified configurations of the workload on this device in
the records store (`trial.records`) are proposed before anything the algorithm proposes, best first.
They are measured again rather than trusted, since the kernel, the device's state or the trial may have
changed since, and the algorithm then builds on their results like on any others.
"""
from __future__ import annotations

import copy
import heapq
import json
import logging
import math
import os
import random
import sqlite3
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from numbers import Real
from operator import attrgetter
from pathlib import Path
from typing import Any

import nni
from nni.tuner import Tuner

from searchspace import Config, ConstrainedSpace, SearchSpace

from .rules import TargetRules

_logger = logging.getLogger(__name__)

CHECKPOINT_ENV = "NNI_CHECKPOINT_DIRECTORY"
"""Set by NNI's manager for the tuner process, on both create and resume: <experiment dir>/checkpoint."""

RANDOM_TRIES = 64
"""Uniform samples tried before `random_unseen` falls back to a breadth-first search."""

PENDING, OK, FAILED = "pending", "ok", "failed"

_VALUE = attrgetter("value")
"""The metric of an `_Entry`, the key that `SpaceTuner.top` ranks successes by."""


class RequestQueued(nni.NoMoreTrialError):
    """`generate_parameters` could not answer now; the parameters will be sent later through st_callback."""


@dataclass
class _Entry:
    config: Config
    state: str
    value: float | None = None


def _workload_key(workload: Any) -> str:
    """The records' key of the workload classArg 'op/spec'; a ValueError that says what is wrong."""
    from trial.workload import SpecError, parse_name

    try:
        return parse_name(workload).key
    except SpecError as err:
        raise ValueError(f"workload must be op/spec, e.g. mm/N512K1024M1024, got {workload!r}: {err}") from None


def positive_int(name: str, value: Any) -> int:
    """`value` if it is a positive int (not a bool); else a ValueError naming the classArg `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def parse_metric(value: Any) -> float | None:
    """The number a trial's final result carries, or None when the trial failed.

    Accepts a plain number or the trial's dict `{"default": gflops, "status": ..., ...}`; a status other
    than "ok", or a missing or non-finite number, is a failure.
    """
    if isinstance(value, dict):
        if value.get("status", OK) != OK:
            return None
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        return None
    return float(value)


class SpaceTuner(Tuner):
    """Base of the suite's tuners over a `SearchSpace`.

    Subclasses implement `propose()`, called with the lock held, returning a configuration not yet seen
    (measured or in flight) or None to have the request wait until the next result. The base raises
    `nni.NoMoreTrialError` once every configuration of the space has been seen.

    classArgs every subclass takes:
        optimize_mode: 'maximize' (e.g. GFLOPS, the default) or 'minimize' (e.g. seconds).
        seed: seed of the tuner's random generator, for reproducible runs (None).
        warm_start: propose the best recorded configurations first (False).
        workload: op/spec of the tuned operator, e.g. 'mm/N512K1024M1024', whose records warm start
            reads; required with warm_start.
        device: the device name the records must have been measured on (default: the device trials use
            on this machine, of the target $OPEVO_TARGET, else auto).
        warm_size: how many of the best recorded configurations are proposed (8).
        target: the device whose rules every proposal keeps (threads, shared memory, registers, vector
            widths, see trial/constraints.py), with `workload`: 'auto' (the device trials use on the
            machine that runs the tuner, asked of its measuring service), an architecture ('sm_90',
            'gfx90a', 'llvm', ... trial/archs.py) or a device's description as `python -m
            experiments.write` records it; null searches the whole space.
    """

    def __init__(self, optimize_mode: str = "maximize", seed: int | None = None, warm_start: bool = False,
                 workload: str | None = None, device: str | None = None, warm_size: int = 8,
                 target: str | dict[str, Any] | None = None) -> None:
        super().__init__()
        if optimize_mode not in ("maximize", "minimize"):
            raise ValueError(f"optimize_mode must be 'maximize' or 'minimize', got {optimize_mode!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer or null, got {seed!r}")
        if not isinstance(warm_start, bool):
            raise ValueError(f"warm_start must be true or false, got {warm_start!r}")
        if warm_start and workload is None:
            raise ValueError("workload (op/spec, e.g. mm/N512K1024M1024) is required when warm_start is true")
        if target is not None and workload is None:
            raise ValueError("workload (op/spec, e.g. mm/N512K1024M1024) is required with target")
        if device is not None and (not isinstance(device, str) or not device):
            raise ValueError(f"device must be a device name as the records hold it, or null, got {device!r}")
        self.optimize_mode = optimize_mode
        self.rng = random.Random(seed)
        self.warm_start = warm_start
        self.workload_key = None if workload is None else _workload_key(workload)
        self.device = device
        self.warm_size = positive_int("warm_size", warm_size)
        self.rules = None if target is None else TargetRules(workload, target)
        self.warm_configs: list[Config] = []
        """The recorded configurations warm start proposes, best first (empty when it starts cold)."""
        self.space: SearchSpace | None = None
        self._lock = threading.RLock()
        self._entries: dict[Hashable, _Entry] = {}
        self._issued: dict[int, Hashable] = {}
        self._pending: dict[int, Hashable] = {}
        self._queue: deque[int] = deque()
        self._warm: deque[Config] = deque()
        self._callback: Callable[[int, Config], None] | None = None
        self._dirty = False
        directory = os.environ.get(CHECKPOINT_ENV)
        self.state_path = (Path(directory) / f"{type(self).__name__}.state.json"
                           if directory and os.path.isdir(directory) else None)
        self._accept_customized_trials()

    # ---- hooks for subclasses -------------------------------------------------------------------------

    def propose(self) -> Config | None:
        """The next configuration to measure (unseen), or None if the algorithm must wait for results."""
        raise NotImplementedError

    def observe(self, config: Config, value: float | None) -> None:
        """A configuration was measured: `value` is its metric, or None if the trial failed.

        Also called for every result restored from the state file on resume, and again with a number for a
        configuration first reported failed (a metric can arrive after its trial_end). Lock held.
        """

    # ---- helpers for subclasses (call with the lock held, i.e. from propose/observe) ----------------

    @property
    def maximize(self) -> bool:
        return self.optimize_mode == "maximize"

    def score(self, value: float) -> float:
        """`value` oriented so that higher is better in either optimize mode."""
        return value if self.maximize else -value

    @property
    def num_pending(self) -> int:
        """Configurations proposed in this run whose trials have not ended."""
        return len(self._pending)

    def is_seen(self, config: Config) -> bool:
        """Whether `config` was measured (successfully or not) or is in flight."""
        assert self.space is not None
        return self.space.key(config) in self._entries

    def measured(self) -> list[tuple[Config, float]]:
        """Successful measurements as (configuration, metric), oldest first."""
        with self._lock:
            return [(copy.deepcopy(e.config), e.value) for e in self._entries.values() if e.state == OK]

    def history(self) -> list[tuple[Config, float | None]]:
        """Every finished measurement as (configuration, metric or None if it failed), oldest first."""
        with self._lock:
            return [(copy.deepcopy(e.config), e.value) for e in self._entries.values() if e.state != PENDING]

    def top(self, n: int) -> list[tuple[Config, float]]:
        """The `n` best successful measurements as (configuration, metric), best first, the oldest first among equals.

        Ranks the entries in place (heapq's top-n is stable, like a stable sort by score), so only the
        configurations returned are copied: this runs for every proposal of some tuners.
        """
        with self._lock:
            successes = (e for e in self._entries.values() if e.state == OK)
            pick = heapq.nlargest if self.maximize else heapq.nsmallest
            return [(copy.deepcopy(e.config), e.value) for e in pick(n, successes, key=_VALUE)]

    def best(self) -> tuple[Config, float] | None:
        """The best successful measurement as (configuration, metric), the oldest among equals; None if none."""
        ranked = self.top(1)
        return ranked[0] if ranked else None

    def random_unseen(self) -> Config | None:
        """A uniformly random unseen configuration, or the nearest unseen one to a random sample."""
        assert self.space is not None
        config = self.space.sample(self.rng)
        for _ in range(RANDOM_TRIES):
            if not self.is_seen(config):
                return config
            config = self.space.sample(self.rng)
        return self.nearest_unseen(config)

    def nearest_unseen(self, start: Config) -> Config | None:
        """An unseen configuration fewest moves from `start` (random among the nearest); None if none.

        The search only expands seen configurations, so it costs at most (seen + 1) neighbourhoods.
        """
        assert self.space is not None
        start_key = self.space.key(start)
        if start_key not in self._entries:
            return copy.deepcopy(start)
        visited = {start_key}
        frontier = deque([start])
        while frontier:
            options = self.space.neighbours(frontier.popleft())
            self.rng.shuffle(options)
            for config in options:
                key = self.space.key(config)
                if key in visited:
                    continue
                if key not in self._entries:
                    return config
                visited.add(key)
                frontier.append(config)
        return None

    # ---- NNI Tuner API ------------------------------------------------------------------------------

    def update_search_space(self, search_space: dict[str, Any]) -> None:
        """Build the space; on the first call also restore the state a previous run of this experiment saved.

        On a later call (nnictl update searchspace) measurements that no longer fit the space are dropped.
        With warm start, the best recorded configurations that fit the space are queued to be proposed first.
        """
        space = SearchSpace.from_json(search_space)
        if self.rules is not None:
            space = ConstrainedSpace.of(space, self.rules.of(space))
        warm = self._recorded_best(space) if self.warm_start else []
        with self._lock:
            self.warm_configs = warm
            self._warm = deque(copy.deepcopy(warm))
            restoring = self.space is None
            entries = self._load_state() if restoring else list(self._entries.values())
            issued = {pid: self._entries[key].config for pid, key in self._issued.items()}
            self.space = space
            self._entries = {}
            dropped = 0
            for entry in entries:
                if space.contains(entry.config):
                    self._entries[space.key(entry.config)] = entry
                else:
                    dropped += 1
            self._issued = {pid: space.key(config) for pid, config in issued.items() if space.contains(config)}
            self._pending = {pid: self._issued[pid] for pid in self._pending if pid in self._issued}
            if dropped:
                _logger.warning("%d earlier configurations do not fit the search space and were dropped", dropped)
            if restoring:
                for entry in self._entries.values():
                    self.observe(copy.deepcopy(entry.config), entry.value)
            self._dirty = True
            ready = self._drain()
            self._flush()
        self._send(ready)

    def generate_multiple_parameters(self, parameter_id_list: list[int], **kwargs: Any) -> list[Config]:
        """Parameters for a prefix of the ids; the rest wait in a queue and go out through st_callback.

        NNI pairs the returned list with the ids by position, hence a prefix. An empty or short list with
        nothing queued means the space is exhausted (NNI then marks the tuner as having no more trials).
        """
        callback = kwargs.get("st_callback")
        with self._lock:
            if self.space is None:
                raise RuntimeError("update_search_space must be called before generating parameters")
            if callback is not None:
                self._callback = callback
            self._queue.extend(parameter_id_list)
            ready = self._drain()
            if self._callback is None:
                waiting = set(parameter_id_list)
                self._queue = deque(pid for pid in self._queue if pid not in waiting)
            self._flush()
        requested = set(parameter_id_list)
        answered = [config for pid, config in ready if pid in requested]
        self._send([(pid, config) for pid, config in ready if pid not in requested])
        return answered

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> Config:
        """One configuration; `RequestQueued` if it will come later via st_callback, `NoMoreTrialError` if none."""
        answered = self.generate_multiple_parameters([parameter_id], **kwargs)
        if answered:
            return answered[0]
        with self._lock:
            if parameter_id in self._queue:
                raise RequestQueued(f"parameter {parameter_id} is queued and will be sent through st_callback")
            if self._exhausted():
                raise nni.NoMoreTrialError("every configuration of the search space has been proposed")
        raise nni.NoMoreTrialError("no configuration can be proposed now and there is no st_callback to send one later")

    def receive_trial_result(self, parameter_id: int, parameters: Config, value: Any, **kwargs: Any) -> None:
        """Record a final result, paired by parameter id.

        `parameters` is used only for ids this run never issued (customized trials). A second result for
        an id is ignored unless the first outcome was a failure.
        """
        metric = parse_metric(value)
        with self._lock:
            if self.space is None:
                _logger.warning("result for parameter %s arrived before the search space; ignored", parameter_id)
                return
            self._pending.pop(parameter_id, None)
            key = self._issued.get(parameter_id)
            if key is None:
                if not self.space.contains(parameters):
                    _logger.warning("result for unknown parameter %s with parameters outside the space: %s",
                                    parameter_id, "; ".join(self.space.problems(parameters)))
                    return
                key = self._record(parameters)
            self._settle(key, metric)
            ready = self._drain()
            self._flush()
        self._send(ready)

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        """A trial ended; if it left no result its configuration counts as measured and failed."""
        with self._lock:
            key = self._pending.pop(parameter_id, None)
            if key is None:
                return
            if self._entries[key].state == PENDING:
                _logger.info("trial of parameter %s ended (%s) without a result", parameter_id,
                             "succeeded" if success else "failed")
            self._settle(key, None)
            ready = self._drain()
            self._flush()
        self._send(ready)

    def import_data(self, data: list[dict[str, Any]]) -> None:
        """Take in earlier results, as NNI sends them on resume: [{"parameter": ..., "value": ...}, ...]."""
        with self._lock:
            if self.space is None:
                _logger.warning("import_data before update_search_space; %d records ignored", len(data))
                return
            skipped = 0
            for record in data:
                params = record.get("parameter") if isinstance(record, dict) else None
                if not self.space.contains(params):
                    skipped += 1
                    continue
                self._settle(self._record(params), parse_metric(record.get("value")))
            if skipped:
                _logger.warning("import_data: %d records outside the search space were ignored", skipped)
            ready = self._drain()
            self._flush()
        self._send(ready)

    # ---- internals (lock held) ----------------------------------------------------------------------

    def _exhausted(self) -> bool:
        assert self.space is not None
        return len(self._entries) >= self.space.size

    def _record(self, config: Config) -> Hashable:
        """The key of `config`, adding it as in flight if it was never seen."""
        assert self.space is not None
        key = self.space.key(config)
        if key not in self._entries:
            self._entries[key] = _Entry(copy.deepcopy(config), PENDING)
        return key

    def _settle(self, key: Hashable, value: float | None) -> None:
        """Give a configuration its outcome; a success is final, a failure can still be overturned."""
        entry = self._entries[key]
        if entry.state == OK or (entry.state == FAILED and value is None):
            return
        entry.state, entry.value = (OK, value) if value is not None else (FAILED, None)
        self._dirty = True
        self.observe(copy.deepcopy(entry.config), value)

    def _drain(self) -> list[tuple[int, Config]]:
        """Answer queued requests in order for as long as the algorithm can propose."""
        assert self.space is not None
        ready = []
        while self._queue:
            if self._exhausted():
                _logger.info("search space exhausted; %d requests dropped", len(self._queue))
                self._queue.clear()
                break
            config = self._next_warm() or self.propose()
            if config is None:
                break
            key = self.space.key(config)
            if key in self._entries:
                raise RuntimeError(f"{type(self).__name__}.propose returned a configuration already seen: {config}")
            pid = self._queue.popleft()
            self._entries[key] = _Entry(copy.deepcopy(config), PENDING)
            self._issued[pid] = self._pending[pid] = key
            self._dirty = True
            ready.append((pid, copy.deepcopy(config)))
        return ready

    def _next_warm(self) -> Config | None:
        """The best queued warm-start configuration not seen yet (a resumed run measured some already)."""
        assert self.space is not None
        while self._warm:
            config = self._warm.popleft()
            if not self.is_seen(config):
                return config
        return None

    def _send(self, ready: list[tuple[int, Config]]) -> None:
        """Deliver answers to earlier requests through NNI's st_callback (outside the lock)."""
        for pid, config in ready:
            assert self._callback is not None
            self._callback(pid, config)

    def _flush(self) -> None:
        """Write the state file if anything changed; atomic, so a crash never leaves a torn file."""
        if not self._dirty or self.state_path is None or self.space is None:
            return
        state = {
            "version": 1,
            "tuner": type(self).__name__,
            "optimize_mode": self.optimize_mode,
            "search_space": self.space.to_json(),
            "records": [{"config": e.config, "state": e.state, "value": e.value} for e in self._entries.values()],
        }
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(state), encoding="utf-8")
            os.replace(tmp, self.state_path)
            self._dirty = False
        except OSError as e:
            _logger.warning("cannot write tuner state to %s: %s", self.state_path, e)

    def _load_state(self) -> list[_Entry]:
        """Entries saved by an earlier run; configurations that were in flight count as failed.

        Parameter ids are not restored: NNI restarts them on resume, and results of trials it re-runs
        arrive through import_data, which can still turn such a failure into a success.
        """
        if self.state_path is None or not self.state_path.exists():
            return []
        try:
            records = json.loads(self.state_path.read_text(encoding="utf-8"))["records"]
            entries = []
            for r in records:
                value = parse_metric(r["value"]) if r["state"] == OK else None
                entries.append(_Entry(r["config"], FAILED if value is None else OK, value))
        except (OSError, ValueError, KeyError, TypeError) as e:
            _logger.warning("ignoring unreadable tuner state %s: %s", self.state_path, e)
            return []
        _logger.info("restored %d configurations from %s", len(entries), self.state_path)
        return entries

    def _recorded_best(self, space: SearchSpace) -> list[Config]:
        """The best verified configurations of the workload on the device that fit `space`, best first.

        Empty, with the reason logged, when the store is missing, unreadable or holds none: the run then
        starts cold. The device is asked of a child process only when the workload has records at all.
        """
        from trial.records import Records, default_path

        path = default_path()
        if not path.exists():
            _logger.info("warm start: no records store at %s; starting cold", path)
            return []
        try:
            store = Records(path)
            if not store.best(self.workload_key):
                _logger.info("warm start: no verified record of %s in %s; starting cold", self.workload_key, path)
                return []
            if self.device is None:
                from trial.measure import this_device

                self.device = this_device(os.environ.get("OPEVO_TARGET", "auto"))
            found = store.best(self.workload_key, self.device, n=self.warm_size, fits=space.valid)
        except (sqlite3.Error, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
            _logger.warning("warm start: cannot read the records of %s in %s (%s); starting cold",
                            self.workload_key, path, e)
            return []
        _logger.info("warm start: %d recorded configurations of %s on %s that fit the search space",
                     len(found), self.workload_key, self.device)
        return [r.params for r in found]

"""NNI plumbing shared by the suite's tuners: bookkeeping, dedup, queued requests, failures and resume.

A subclass implements `propose()` (and, if it learns incrementally, `observe()`); `SpaceTuner` turns that
into the NNI 3.0 tuner protocol, whose pitfalls it handles once for every algorithm:

* NNI asks for N parameters and never asks again for the ones it did not get, so a request the algorithm
  cannot answer yet is queued and answered later through the `st_callback` NNI passes to
  `generate_multiple_parameters` (`st_callback(parameter_id, parameters)` sends a new trial job).
* NNI 3.0's local training service can hand a trial another trial's parameters (microsoft/nni#5693,
  #5726), so the same id may report twice and `trial_end` ids are unreliable; a metric may also arrive
  after its `trial_end`. A result therefore goes to the configuration the trial reports it measured
  (the `params` of its metric), live and on resume (`import_data`), never to what NNI says it sent.
* `trial_end` runs on NNI's assessor thread, results and requests on the main one: one lock guards all.
* NNI 3.0 never calls `save_checkpoint`, so every change goes to a state file in `NNI_CHECKPOINT_DIRECTORY`
  (`tuners.state`), read back by `update_search_space`; `import_data` feeds earlier results on resume.
* A tuner method that raises stops NNI's dispatcher silently (the experiment stays RUNNING with no trial),
  so each one reports its error to the manager first (`tuners.failure`): the experiment ends as ERROR.

The classArgs every tuner takes are in `tuners.classargs`; warm start is `tuners.warm`.
"""
from __future__ import annotations

import copy
import logging
import os
from collections import deque
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import nni
from nni.tuner import Tuner

from searchspace import Config, ConstrainedSpace, SearchSpace
from trial import timeline

from .classargs import CommonArgs
from .failure import reported
from .ledger import Ledger
from .state import PENDING, Entry, StateFile, measured_params, parse_metric
from .warm import recorded_best

_logger = logging.getLogger(__name__)

CHECKPOINT_ENV = "NNI_CHECKPOINT_DIRECTORY"
"""Set by NNI's manager for the tuner process, on both create and resume: <experiment dir>/checkpoint."""


class RequestQueued(nni.NoMoreTrialError):
    """`generate_parameters` could not answer now; the parameters will be sent later through st_callback."""


class SpaceTuner(Ledger, Tuner):
    """Base of the suite's tuners over a `SearchSpace`.

    Subclasses implement `propose()`, called with the lock held, returning a configuration not yet seen
    (measured or in flight) or None to have the request wait until the next result. The base raises
    `nni.NoMoreTrialError` once every configuration of the space has been seen.

    Every subclass takes the common classArgs of `tuners.classargs` as keywords.
    """

    def __init__(self, optimize_mode: str = "maximize", seed: int | None = None, warm_start: bool = False,
                 workload: str | None = None, device: str | None = None, warm_size: int = 8,
                 target: str | dict[str, Any] | None = None, sampling: str = "uniform") -> None:
        self.args = CommonArgs.parse(optimize_mode, seed, warm_start, workload, device, warm_size, target, sampling)
        Ledger.__init__(self, self.args.maximize, seed, self.args.nearest)
        Tuner.__init__(self)
        self.optimize_mode = optimize_mode
        self.warm_configs: list[Config] = []
        """The recorded configurations warm start proposes, best first (empty when it starts cold)."""
        self._issued: dict[int, Hashable] = {}
        self._queue: deque[int] = deque()
        self._warm: deque[Config] = deque()
        self._callback: Callable[[int, Config], None] | None = None
        self._space_changed = False
        directory = os.environ.get(CHECKPOINT_ENV)
        self.state = (StateFile(Path(directory), type(self).__name__)
                      if directory and os.path.isdir(directory) else None)
        self._accept_customized_trials()

    # ---- hooks for subclasses -------------------------------------------------------------------------

    def propose(self) -> Config | None:
        """The next configuration to measure (unseen), or None if the algorithm must wait for results."""
        raise NotImplementedError

    # ---- NNI Tuner API ------------------------------------------------------------------------------

    @reported("rejected the search space")
    def update_search_space(self, search_space: dict[str, Any]) -> None:
        """Build the space; on the first call also restore the state a previous run of this experiment saved.

        On a later call (nnictl update searchspace) measurements that no longer fit the space are dropped.
        With warm start, the best recorded configurations that fit the space are queued to be proposed first.
        """
        space = SearchSpace.from_json(search_space)
        if self.args.rules is not None:
            space = ConstrainedSpace.of(space, self.args.rules.of(space))
        args = self.args
        warm = recorded_best(args.workload_key, args.device, args.warm_size, space) if args.warm_start else []
        with self._lock:
            self.warm_configs = warm
            self._warm = deque(copy.deepcopy(warm))
            restoring = self.space is None
            entries = (self.state.load() if self.state else []) if restoring else list(self._entries.values())
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
            self._space_changed = True
            ready = self._drain()
            self._flush()
        self._send(ready)

    @reported("failed to propose parameters")
    def generate_multiple_parameters(self, parameter_id_list: list[int], **kwargs: Any) -> list[Config]:
        """Parameters for a prefix of the ids; the rest wait in a queue and go out through st_callback.

        NNI pairs the returned list with the ids by position, hence a prefix. An empty or short list with
        nothing queued means the space is exhausted (NNI then marks the tuner as having no more trials).
        """
        callback = kwargs.get("st_callback")
        timeline.mark("tuner_asked", parameter_ids=parameter_id_list)
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
        if answered := self.generate_multiple_parameters([parameter_id], **kwargs):
            return answered[0]
        with self._lock:
            if parameter_id in self._queue:
                raise RequestQueued(f"parameter {parameter_id} is queued and will be sent through st_callback")
            if self._exhausted():
                raise nni.NoMoreTrialError("every configuration of the search space has been proposed")
        raise nni.NoMoreTrialError("no configuration can be proposed now and there is no st_callback to send one later")

    @reported("failed on a trial's result")
    def receive_trial_result(self, parameter_id: int, parameters: Config, value: Any, **kwargs: Any) -> None:
        """Record a final result against the configuration the trial reports it measured.

        That is the metric's `params` (`tuners.state.measured_params`); a result that does not say goes to
        the configuration issued for `parameter_id`, or for ids this run never issued (customized
        trials) to NNI's `parameters`. A result whose configuration lies outside the space is ignored.
        A second result for a configuration is ignored unless the first outcome was a failure.
        """
        timeline.mark("tuner_result", parameter_id=parameter_id)
        metric = parse_metric(value)
        with self._lock:
            if self.space is None:
                _logger.warning("result for parameter %s arrived before the search space; ignored", parameter_id)
                return
            issued = self._issued.get(parameter_id)
            measured = measured_params(value, None if issued is not None else parameters)
            if measured is None:
                key = issued
            elif not self.space.contains(measured):
                _logger.warning("result for parameter %s measured a configuration outside the space: %s",
                                parameter_id, "; ".join(self.space.problems(measured)))
                return
            else:
                key = self._record(measured)
                if issued is not None and key != issued:
                    _logger.warning("parameter %s was issued as %s but its trial measured %s; the result goes "
                                    "to what it measured", parameter_id, self._entries[issued].config, measured)
            if key == self._pending.get(parameter_id):
                del self._pending[parameter_id]
            self._settle(key, metric)
            ready = self._drain()
            self._flush()
        self._send(ready)

    @reported("failed on a trial's end")
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

    @reported("failed to import earlier results")
    def import_data(self, data: list[dict[str, Any]]) -> None:
        """Take in earlier results, as NNI sends them on resume: [{"parameter": ..., "value": ...}, ...].

        Each value goes to the configuration its trial reports it measured (the metric's `params`), not to
        NNI's `parameter`: NNI pairs a trial job's final metric with the parameters it sent that job, and
        after a parameter swap (microsoft/nni#5726) those belong to another trial. A value without
        `params` (a plain number, from `nnictl experiment import`) goes to `parameter`. NNI's dispatcher
        also routes here the results of trials it re-runs after a resume. Records whose configuration
        lies outside the space are ignored.
        """
        with self._lock:
            if self.space is None:
                _logger.warning("import_data before update_search_space; %d records ignored", len(data))
                return
            skipped = swapped = 0
            for record in data:
                if not isinstance(record, dict):
                    skipped += 1
                    continue
                params = measured_params(record.get("value"), record.get("parameter"))
                if not self.space.contains(params):
                    skipped += 1
                    continue
                swapped += params != record.get("parameter")
                self._settle(self._record(params), parse_metric(record.get("value")))
            if skipped:
                _logger.warning("import_data: %d records without a configuration of the space ignored", skipped)
            if swapped:
                _logger.info("import_data: %d results measured another configuration than NNI's parameter; "
                             "each went to the one measured", swapped)
            ready = self._drain()
            self._flush()
        self._send(ready)

    # ---- internals (lock held) ----------------------------------------------------------------------

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
            self._entries[key] = Entry(copy.deepcopy(config), PENDING)
            self._issued[pid] = self._pending[pid] = key
            self._changed[key] = None
            ready.append((pid, copy.deepcopy(config)))
        if ready:  # answers leave at once (returned, or through st_callback)
            timeline.mark("tuner_proposed", parameter_ids=[pid for pid, _ in ready])
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
        """Log the entries that changed to the state file (the whole state when the space changed)."""
        if self.state is None or self.space is None or not (self._changed or self._space_changed):
            return
        if self._space_changed:
            written = self.state.rewrite(self.space.to_json(), self._entries.values())
        else:
            written = self.state.append(self._entries[key] for key in self._changed)
        if written:
            self._changed.clear()
            self._space_changed = False

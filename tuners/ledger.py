"""What a tuner has seen: every configuration proposed or reported, with its outcome, and queries on it.

The bookkeeping half of `SpaceTuner` (the other half speaks NNI's protocol), and the helpers its search
strategies build on: the best measurements, and unseen configurations near a point or at random.
"""
from __future__ import annotations

import copy
import heapq
import random
import threading
from collections import deque
from collections.abc import Hashable
from operator import attrgetter

from searchspace import Config, SearchSpace, SpaceError

from .state import FAILED, OK, PENDING, Entry

RANDOM_TRIES = 64
"""Random samples tried before `random_unseen` falls back to a breadth-first search."""

_VALUE = attrgetter("value")
"""The metric of an `Entry`, the key that `Ledger.top` ranks successes by."""


class Ledger:
    """Entries by configuration key, guarded by one lock (results and `trial_end` come on two threads).

    Methods other than the public queries expect the lock held, as `propose`/`observe` hold it.
    """

    def __init__(self, maximize: bool, seed: int | None, nearest: bool = False) -> None:
        self._maximize = maximize
        self.rng = random.Random(seed)
        self.nearest = nearest
        """Whether `random_unseen` draws by `SearchSpace.sample_nearest` rather than uniformly."""
        self.space: SearchSpace | None = None
        self._lock = threading.RLock()
        self._entries: dict[Hashable, Entry] = {}
        self._pending: dict[int, Hashable] = {}
        self._changed: dict[Hashable, None] = {}
        """Keys whose entries changed since the state file was last written (a dict keeps the order)."""

    def observe(self, config: Config, value: float | None) -> None:
        """A configuration was measured: `value` is its metric, or None if the trial failed.

        Also called for every result restored from the state file on resume, and again with a number for a
        configuration first reported failed (a metric can arrive after its trial_end). Lock held.
        """

    @property
    def maximize(self) -> bool:
        return self._maximize

    def score(self, value: float) -> float:
        """`value` oriented so that higher is better in either optimize mode."""
        return value if self.maximize else -value

    @property
    def num_pending(self) -> int:
        """Configurations proposed in this run whose trials have not ended."""
        return len(self._pending)

    @property
    def num_finished(self) -> int:
        """Configurations measured, successfully or not."""
        return sum(entry.state != PENDING for entry in self._entries.values())

    def is_seen(self, config: Config) -> bool:
        """Whether `config` was measured (successfully or not) or is in flight."""
        assert self.space is not None
        return self.is_seen_key(self.space.key(config))

    def is_seen_key(self, key: Hashable) -> bool:
        """`is_seen` of the configuration whose `SearchSpace.key` is `key` (for a caller that needs the key too)."""
        return key in self._entries

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
        """A random unseen configuration (uniform, or `sample_nearest`'s), or the nearest unseen one to a sample."""
        config = self._sample()
        for _ in range(RANDOM_TRIES):
            if not self.is_seen(config):
                return config
            config = self._sample()
        return self.nearest_unseen(config)

    def _sample(self) -> Config:
        """A random configuration (`random_unseen`'s draw).  In a constrained space a draw is repaired to the
        rules, and a repair can end far from every valid configuration (`SpaceError`): that draw is left and
        another made; the error stands only when RANDOM_TRIES draws in a row fail, as where the device runs
        no kernel of the space."""
        assert self.space is not None
        draw = self.space.sample_nearest if self.nearest else self.space.sample
        for _ in range(RANDOM_TRIES - 1):
            try:
                return draw(self.rng)
            except SpaceError:
                continue
        return draw(self.rng)  # the last try: its error stands

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

    def _exhausted(self) -> bool:
        assert self.space is not None
        return len(self._entries) >= self.space.size

    def _record(self, config: Config) -> Hashable:
        """The key of `config`, adding it as in flight if it was never seen."""
        assert self.space is not None
        key = self.space.key(config)
        if key not in self._entries:
            self._entries[key] = Entry(copy.deepcopy(config), PENDING)
            self._changed[key] = None
        return key

    def _settle(self, key: Hashable, value: float | None) -> None:
        """Give a configuration its outcome; a success is final, a failure can still be overturned."""
        entry = self._entries[key]
        if entry.state == OK or (entry.state == FAILED and value is None):
            return
        entry.state, entry.value = (OK, value) if value is not None else (FAILED, None)
        self._changed[key] = None
        self.observe(copy.deepcopy(entry.config), value)

"""The interface every parameter type implements, and the q-random walk they share."""
from __future__ import annotations

import copy
import random
from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any, ClassVar

MAX_ENUMERATION = 1_000_000
"""Largest number of values that `values()` will list; beyond it enumeration is refused as a likely mistake."""
MAX_VALUES = 4096
"""Most values a `choice` or `discrete` may list."""


_ATOMS = (int, float, str, bool, type(None))


def copied(value: Any) -> Any:
    """`copy.deepcopy(value)` for a knob's value, without its cost on the numbers, strings and flat lists that
    nearly every value is (a tuner copies values hundreds of thousands of times a run)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is list:
        return [v if type(v) in _ATOMS else copied(v) for v in value]
    return copy.deepcopy(value)


def shown(value: Any, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters: error messages quote what a user wrote, not megabytes of it."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Parameter(ABC):
    """One named knob of a search space: a finite set of values with a neighbour graph on it.

    The neighbour graph is connected and symmetric for every type, so a random walk can reach any value and
    a breadth-first search from any value finds every other one. Methods other than `check`/`contains`
    assume the value is valid (`SearchSpace` validates before calling them).
    """

    type_name: ClassVar[str]

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    @abstractmethod
    def from_value(cls, name: str, value: Any) -> Parameter:
        """Build the parameter from its `_value` in NNI search-space JSON; `SpaceError` if malformed."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of distinct values."""

    @property
    @abstractmethod
    def spec(self) -> Any:
        """The `_value` this parameter was built from (JSON-serialisable)."""

    @property
    @abstractmethod
    def encode_width(self) -> int:
        """Length of every vector `encode` returns."""

    @property
    @abstractmethod
    def least(self) -> Any:
        """The smallest value in the type's own order (first part holds everything, smallest number,
        first option, identity): where a rule that grows with the value is loosest."""

    @abstractmethod
    def sample(self, rng: random.Random) -> Any:
        """A value drawn uniformly at random."""

    @abstractmethod
    def neighbours(self, value: Any) -> list[Any]:
        """The values one move away from `value` (never `value` itself, no repeats)."""

    @abstractmethod
    def moves(self) -> list[tuple[int, ...]]:
        """Every move of the parameter, a fixed list (a learning tuner's action set, as in N-A2C): the
        moves that apply at a value lead to exactly its neighbours."""

    @abstractmethod
    def move(self, value: Any, move: tuple[int, ...]) -> Any:
        """Where `move`, one of `moves()`, leads from `value`: an equal value where the move does not apply
        (a sentinel would be ambiguous: a choice may hold None)."""

    @abstractmethod
    def check(self, value: Any) -> str | None:
        """Why `value` is not a value of this parameter, or None if it is."""

    @abstractmethod
    def key(self, value: Any) -> Hashable:
        """A hashable canonical form: equal values (e.g. a list and a tuple of the same ints) share it."""

    @abstractmethod
    def encode(self, value: Any) -> list[float]:
        """A fixed-length numeric vector in [0, 1] for learning tuners."""

    @abstractmethod
    def _enumerate(self) -> list[Any]:
        """All values in a canonical order (called only when the size is under the enumeration limit)."""

    def contains(self, value: Any) -> bool:
        """Whether `value` is a value of this parameter."""
        return self.check(value) is None

    def values(self) -> list[Any]:
        """All values, in a canonical order; `ValueError` when there are more than `MAX_ENUMERATION`."""
        if self.size > MAX_ENUMERATION:
            raise ValueError(f"{self.name}: {self.size} values are too many to enumerate (limit {MAX_ENUMERATION})")
        return self._enumerate()

    def mutate(self, value: Any, rng: random.Random, q: float = 0.5) -> Any:
        """A draw from the q-random walk distribution around `value` (OpEvo, arXiv 2006.05664).

        The walk starts at `value`; at each step it stops with probability `q`, otherwise it moves to a
        neighbour chosen uniformly. The number of moves is geometric, so nearby values are likelier than
        distant ones while every value stays reachable: small `q` explores, large `q` exploits.
        """
        if not 0.0 < q <= 1.0:
            raise ValueError(f"q must be in (0, 1], got {q!r}")
        value = copied(value)
        while rng.random() >= q:
            options = self.neighbours(value)
            if not options:
                break
            value = rng.choice(options)
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.spec!r})"


def is_int(value: Any) -> bool:
    """True for Python ints but not bools, which JSON keeps apart."""
    return isinstance(value, int) and not isinstance(value, bool)

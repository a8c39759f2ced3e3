"""`discrete`: an ordered list of numbers, walked one step at a time."""
from __future__ import annotations

import math
import random
from numbers import Real
from typing import Any

from .errors import SpaceError
from .param import MAX_VALUES, Parameter, shown


def _is_number(value: Any) -> bool:
    if type(value) is int:  # the common case first: isinstance on an ABC is slow
        return True
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


class Discrete(Parameter):
    """`_value: [n1 < n2 < ...]`; neighbours are the adjacent numbers, so the walk respects the order."""

    type_name = "discrete"

    def __init__(self, name: str, numbers: list[int | float]) -> None:
        super().__init__(name)
        self.numbers = list(numbers)
        self._index = {v: i for i, v in enumerate(self.numbers)}

    @classmethod
    def from_value(cls, name: str, value: Any) -> Discrete:
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_VALUES:
            raise SpaceError(f"{name}: discrete _value must be a list of 1 to {MAX_VALUES} numbers, got {shown(value)}")
        bad = [v for v in value if not _is_number(v)]
        if bad:
            raise SpaceError(f"{name}: discrete values must be finite numbers, got {shown(bad[0])}")
        if any(a >= b for a, b in zip(value, value[1:])):
            raise SpaceError(f"{name}: discrete values must be sorted ascending without repeats, got {shown(value)}")
        return cls(name, value)

    @property
    def size(self) -> int:
        return len(self.numbers)

    @property
    def spec(self) -> list[int | float]:
        return list(self.numbers)

    @property
    def encode_width(self) -> int:
        return 1

    @property
    def least(self) -> int | float:
        return self.numbers[0]

    def sample(self, rng: random.Random) -> int | float:
        return rng.choice(self.numbers)

    def neighbours(self, value: Any) -> list[int | float]:
        i = self._index[value]
        return [self.numbers[j] for j in (i - 1, i + 1) if 0 <= j < len(self.numbers)]

    def moves(self) -> list[tuple[int, ...]]:
        """One step down or up."""
        return [(-1,), (1,)]

    def move(self, value: Any, move: tuple[int, ...]) -> int | float:
        i = self._index[value] + move[0]
        return self.numbers[i] if 0 <= i < len(self.numbers) else value

    def check(self, value: Any) -> str | None:
        if not _is_number(value) or value not in self._index:
            return f"{value!r} is not one of the values {self.numbers!r}"
        return None

    def key(self, value: Any) -> int:
        return self._index[value]

    def encode(self, value: Any) -> list[float]:
        """The rank scaled to [0, 1]: the values are often geometric (0, 16, 64, 512), ranks are even."""
        n = len(self.numbers)
        return [self._index[value] / (n - 1) if n > 1 else 0.0]

    def _enumerate(self) -> list[int | float]:
        return list(self.numbers)

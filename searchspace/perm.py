"""`perm`: orderings of n items (e.g. a loop order)."""
from __future__ import annotations

import itertools
import math
import random
from typing import Any

from .errors import SpaceError
from .param import Parameter, is_int, shown

MAX_N = 10
"""10! = 3,628,800 orderings, each encoded in n^2 numbers: far beyond any loop nest a template reorders."""


class Perm(Parameter):
    """`_value: [n]`; a value is a permutation of range(n) as a list.

    A move swaps any two items (not only adjacent ones), so every value has n(n-1)/2 neighbours and any
    ordering is at most n-1 moves away.
    """

    type_name = "perm"

    def __init__(self, name: str, n: int) -> None:
        super().__init__(name)
        self.n = n

    @classmethod
    def from_value(cls, name: str, value: Any) -> Perm:
        if not isinstance(value, list) or len(value) != 1 or not is_int(value[0]):
            raise SpaceError(f"{name}: perm _value must be [n] with an integer n, got {shown(value)}")
        if not 1 <= value[0] <= MAX_N:
            raise SpaceError(f"{name}: perm n must be between 1 and {MAX_N}, got {value[0]}")
        return cls(name, value[0])

    @property
    def size(self) -> int:
        return math.factorial(self.n)

    @property
    def spec(self) -> list[int]:
        return [self.n]

    @property
    def encode_width(self) -> int:
        return self.n * self.n

    @property
    def least(self) -> list[int]:
        return list(range(self.n))

    def sample(self, rng: random.Random) -> list[int]:
        value = list(range(self.n))
        rng.shuffle(value)
        return value

    def neighbours(self, value: Any) -> list[list[int]]:
        out = []
        for i, j in itertools.combinations(range(self.n), 2):
            swapped = list(value)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            out.append(swapped)
        return out

    def moves(self) -> list[tuple[int, ...]]:
        """Swap the items at positions i < j."""
        return list(itertools.combinations(range(self.n), 2))

    def move(self, value: Any, move: tuple[int, ...]) -> list[int]:
        i, j = move
        swapped = list(value)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        return swapped

    def check(self, value: Any) -> str | None:
        if (not isinstance(value, (list, tuple)) or not all(is_int(v) for v in value)
                or sorted(value) != list(range(self.n))):
            return f"expected a permutation of range({self.n}), got {value!r}"
        return None

    def key(self, value: Any) -> tuple[int, ...]:
        return tuple(value)

    def encode(self, value: Any) -> list[float]:
        """The flattened permutation matrix: row i is one-hot at the item in position i."""
        return [1.0 if value[i] == j else 0.0 for i in range(self.n) for j in range(self.n)]

    def _enumerate(self) -> list[list[int]]:
        return [list(p) for p in itertools.permutations(range(self.n))]

"""`factor`: ordered factorisations of a product into a fixed number of parts (tile sizes of a loop)."""
from __future__ import annotations

import itertools
import math
import random
from typing import Any

from .errors import SpaceError
from .param import Parameter, is_int, shown


MAX_PRODUCT = 2**31 - 1
"""A loop extent: the templates index with 32-bit integers."""
MAX_PARTS = 8

def prime_factors(n: int) -> list[tuple[int, int]]:
    """The prime powers of `n` as (prime, exponent), primes ascending; empty for 1."""
    out = []
    p = 2
    while p * p <= n:
        if n % p == 0:
            e = 0
            while n % p == 0:
                n //= p
                e += 1
            out.append((p, e))
        p += 1 if p == 2 else 2
    if n > 1:
        out.append((n, 1))
    return out


def _compositions(total: int, parts: int) -> list[list[int]]:
    """All ways to write `total` as an ordered sum of `parts` non-negative integers."""
    if parts == 1:
        return [[total]]
    return [[first, *rest] for first in range(total, -1, -1) for rest in _compositions(total - first, parts - 1)]


class Factor(Parameter):
    """`_value: [product, parts]`; a value is a list of `parts` positive ints whose product is `product`.

    A value is one split of each prime power p^e of `product` over the parts, so there are
    prod C(e + parts - 1, parts - 1) values. A move shifts one prime factor from one part to another,
    which changes two tile sizes by the smallest possible ratio.
    """

    type_name = "factor"

    def __init__(self, name: str, product: int, parts: int) -> None:
        super().__init__(name)
        self.product = product
        self.parts = parts
        self.primes = prime_factors(product)

    @classmethod
    def from_value(cls, name: str, value: Any) -> Factor:
        if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(is_int(v) for v in value):
            raise SpaceError(f"{name}: factor _value must be [product, parts] (two integers), got {shown(value)}")
        product, parts = value
        if not 1 <= product <= MAX_PRODUCT:
            raise SpaceError(f"{name}: factor product must be between 1 and {MAX_PRODUCT:,}, got {product}")
        if not 1 <= parts <= MAX_PARTS:
            raise SpaceError(f"{name}: factor parts must be between 1 and {MAX_PARTS}, got {parts}")
        return cls(name, product, parts)

    @property
    def size(self) -> int:
        return math.prod(math.comb(e + self.parts - 1, self.parts - 1) for _, e in self.primes)

    @property
    def spec(self) -> list[int]:
        return [self.product, self.parts]

    @property
    def encode_width(self) -> int:
        return self.parts

    @property
    def least(self) -> list[int]:
        return [self.product] + [1] * (self.parts - 1)

    def sample(self, rng: random.Random) -> list[int]:
        value = [1] * self.parts
        for p, e in self.primes:
            # Bars at parts-1 of e+parts-1 slots (stars and bars) give a uniform split of the exponent.
            bars = sorted(rng.sample(range(e + self.parts - 1), self.parts - 1))
            edges = [-1, *bars, e + self.parts - 1]
            for i in range(self.parts):
                value[i] *= p ** (edges[i + 1] - edges[i] - 1)
        return value

    def neighbours(self, value: Any) -> list[list[int]]:
        out = []
        for i in range(self.parts):
            for p, _ in self.primes:
                if value[i] % p:
                    continue
                for j in range(self.parts):
                    if j != i:
                        moved = list(value)
                        moved[i] //= p
                        moved[j] *= p
                        out.append(moved)
        return out

    def moves(self) -> list[tuple[int, ...]]:
        """(prime, from part, to part)."""
        return [(p, i, j) for p, _ in self.primes for i in range(self.parts) for j in range(self.parts) if i != j]

    def move(self, value: Any, move: tuple[int, ...]) -> list[int]:
        prime, src, dst = move
        if value[src] % prime:
            return list(value)
        moved = list(value)
        moved[src] //= prime
        moved[dst] *= prime
        return moved

    def check(self, value: Any) -> str | None:
        if not isinstance(value, (list, tuple)):
            return f"expected a list of {self.parts} factors of {self.product}, got {value!r}"
        if len(value) != self.parts:
            return f"expected {self.parts} factors, got {len(value)}: {list(value)!r}"
        if not all(is_int(v) and v > 0 for v in value):
            return f"factors must be positive integers, got {list(value)!r}"
        got = math.prod(value)
        if got != self.product:
            return f"factors {list(value)!r} multiply to {got}, expected {self.product}"
        return None

    def key(self, value: Any) -> tuple[int, ...]:
        return tuple(value)

    def encode(self, value: Any) -> list[float]:
        """The share of log(product) each part holds: scale-free, and a move shifts two entries equally."""
        if self.product == 1:
            return [0.0] * self.parts
        total = math.log(self.product)
        return [math.log(v) / total for v in value]

    def _enumerate(self) -> list[list[int]]:
        per_prime = [[[p**k for k in c] for c in _compositions(e, self.parts)] for p, e in self.primes]
        return [[math.prod(col) for col in zip(*combo)] if combo else [1] * self.parts
                for combo in itertools.product(*per_prime)]

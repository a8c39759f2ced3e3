"""`choice`: an unordered set of arbitrary JSON values."""
from __future__ import annotations

import copy
import json
import random
from typing import Any

from .errors import SpaceError
from .param import MAX_VALUES, Parameter, copied, shown


_TEXTS: dict[tuple[type, Any], str] = {}
_TEXTS_KEPT = 4096
_REMEMBERED = (int, str, bool, type(None))  # whose text their type and value fix (not so -0.0 and 0.0)


def _canonical(value: Any) -> str | None:
    """JSON text that tells 1, 1.0 and true apart (Python's == does not); None if not serialisable.  The texts
    of plain ints and strings are remembered: keys of choices are taken for every configuration a tuner scores."""
    kind = type(value)
    if kind in _REMEMBERED:
        found = _TEXTS.get((kind, value))
        if found is not None:
            return found
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return None
    if kind in _REMEMBERED and len(_TEXTS) < _TEXTS_KEPT:
        _TEXTS[kind, value] = text
    return text


class Choice(Parameter):
    """`_value: [v1, v2, ...]`; no order is assumed, so every value neighbours every other."""

    type_name = "choice"

    def __init__(self, name: str, options: list[Any]) -> None:
        super().__init__(name)
        self.options = copy.deepcopy(options)
        self._index = {_canonical(v): i for i, v in enumerate(self.options)}

    @classmethod
    def from_value(cls, name: str, value: Any) -> Choice:
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_VALUES:
            raise SpaceError(f"{name}: choice _value must be a list of 1 to {MAX_VALUES} values, got {shown(value)}")
        seen: set[str] = set()
        for v in value:
            text = _canonical(v)
            if text is None:
                raise SpaceError(f"{name}: choice value {shown(v)} is not JSON-serialisable")
            if text in seen:
                raise SpaceError(f"{name}: choice value {shown(v)} is listed twice")
            seen.add(text)
        return cls(name, value)

    @property
    def size(self) -> int:
        return len(self.options)

    @property
    def spec(self) -> list[Any]:
        return copy.deepcopy(self.options)

    @property
    def encode_width(self) -> int:
        return len(self.options)

    @property
    def least(self) -> Any:
        return copied(self.options[0])

    def sample(self, rng: random.Random) -> Any:
        return copied(rng.choice(self.options))

    def neighbours(self, value: Any) -> list[Any]:
        i = self.key(value)
        return [copied(v) for j, v in enumerate(self.options) if j != i]

    def moves(self) -> list[tuple[int, ...]]:
        """To option k."""
        return [(k,) for k in range(len(self.options))]

    def move(self, value: Any, move: tuple[int, ...]) -> Any:
        return copied(self.options[move[0]])

    def check(self, value: Any) -> str | None:
        if _canonical(value) not in self._index:
            return f"{value!r} is not one of the choices {self.options!r}"
        return None

    def key(self, value: Any) -> int:
        return self._index[_canonical(value)]

    def encode(self, value: Any) -> list[float]:
        """One-hot: choices have no order a learner could exploit."""
        i = self.key(value)
        return [1.0 if j == i else 0.0 for j in range(len(self.options))]

    def _enumerate(self) -> list[Any]:
        return copy.deepcopy(self.options)

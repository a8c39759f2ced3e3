"""`_when`: a parameter that matters only while a `choice` parameter takes some of its values.

One space can hold several kernel families that share no knobs (a direct convolution and a Winograd
one): a `choice` picks the family, and each family's knobs say so, e.g. `"_when": {"algorithm":
["winograd"]}`.  A configuration still names every parameter (NNI's flat format; a family's values are
kept while a tuner tries another family), but an inactive parameter is inert: configurations that differ
only there are one kernel, so `SearchSpace.key` and `encode` read it as its least value and no move
changes it.  One level only: the choice that decides is itself always active.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .choice import Choice
from .errors import SpaceError
from .param import Parameter, shown

WHEN = "_when"


@dataclass(frozen=True)
class Condition:
    """The parameter is active while the choice `on` takes one of `values` (`keys`: their choice keys)."""

    on: str
    values: tuple[Any, ...]
    keys: frozenset[int]

    @classmethod
    def from_value(cls, name: str, value: Any, params: Mapping[str, Parameter]) -> Condition:
        """Read `_when` of parameter `name`; `SpaceError` unless it names another `choice` of the space and
        some of its options."""
        if not isinstance(value, Mapping) or len(value) != 1:
            raise SpaceError(f"{name}: {WHEN} must be an object naming one choice parameter and a list of its "
                             f"values, e.g. {{\"algorithm\": [\"winograd\"]}}, got {shown(value)}")
        (on, values), = value.items()
        controller = params.get(on)
        if on == name or not isinstance(controller, Choice):
            raise SpaceError(f"{name}: {WHEN} names {shown(on)}, which is not another choice parameter of the space")
        if not isinstance(values, list) or not values or any(not controller.contains(v) for v in values):
            raise SpaceError(f"{name}: {WHEN} needs a non-empty list of {on}'s choices {controller.options!r}, "
                             f"got {shown(values)}")
        keys = frozenset(controller.key(v) for v in values)
        if len(keys) != len(values):
            raise SpaceError(f"{name}: {WHEN} lists a choice of {on} twice: {shown(values)}")
        return cls(on, tuple(values), keys)

    @property
    def spec(self) -> dict[str, list[Any]]:
        """The `_when` this condition was read from."""
        return {self.on: list(self.values)}

    def holds(self, controller: Choice, config: Mapping[str, Any]) -> bool:
        """Whether the parameter is active in `config` (whose value of `on` is valid)."""
        return controller.key(config[self.on]) in self.keys

    def first(self, controller: Choice) -> Any:
        """The first of `controller`'s options that makes the parameter active."""
        return next(v for v in controller.options if controller.key(v) in self.keys)

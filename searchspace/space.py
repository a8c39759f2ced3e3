"""`SearchSpace`: the parameters of one NNI search-space JSON, and operations on whole configurations."""
from __future__ import annotations

import copy
import itertools
import json
import math
import os
import random
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from .choice import Choice
from .condition import WHEN, Condition
from .discrete import Discrete
from .errors import SpaceError
from .factor import Factor
from .param import MAX_ENUMERATION, Parameter, copied, shown
from .perm import Perm

TYPES: Mapping[str, type[Parameter]] = MappingProxyType(
    {cls.type_name: cls for cls in (Choice, Discrete, Factor, Perm)})
"""The `_type` names this model understands, mapped to their classes."""

Config = dict[str, Any]
MAX_PARAMETERS = 64
MAX_NAME_CHARS = 100
MAX_FILE_BYTES = 1 << 20
Move = tuple[str, tuple[int, ...]]
"""A parameter's name and one of its moves (`Parameter.moves`)."""


def _values_copied(config: Config) -> Config:
    """`config` with every value copied (`copied`): what the moves from it may share without aliasing it."""
    return {name: copied(value) for name, value in config.items()}


class SearchSpace:
    """An ordered set of named parameters; a configuration maps every name to one of its values.

    Configurations are plain JSON-compatible dicts (lists of ints, not tuples) because NNI ships them as
    JSON. Two configurations are neighbours when they differ in one active parameter by one move of its type
    (`conditions`: parameters that matter only for some values of a choice), and that graph is connected, so
    a walk or a breadth-first search can reach every configuration.
    """

    def __init__(self, params: list[Parameter], conditions: Mapping[str, Condition] | None = None) -> None:
        if not params:
            raise SpaceError("search space has no parameters")
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise SpaceError(f"search space repeats a parameter name: {names!r}")
        self._params = {p.name: p for p in params}
        self._when = dict(conditions or {})
        for name, cond in self._when.items():
            if name not in self._params or not isinstance(self._params.get(cond.on), Choice):
                raise SpaceError(f"{name}: a condition on {cond.on!r} needs both to be parameters, {cond.on} a choice")
            if cond.on in self._when:
                raise SpaceError(f"{name}: its condition's choice {cond.on} has a {WHEN} of its own (one level only)")

    @classmethod
    def from_json(cls, spec: Mapping[str, Any]) -> SearchSpace:
        """Parse NNI search-space JSON (already decoded); `SpaceError` naming the parameter at fault."""
        if not isinstance(spec, Mapping):
            raise SpaceError(f"search space must be a JSON object, got {type(spec).__name__}")
        if len(spec) > MAX_PARAMETERS:
            raise SpaceError(f"search space has {len(spec)} parameters; the limit is {MAX_PARAMETERS}")
        params, whens = [], {}
        for name, entry in spec.items():
            if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
                raise SpaceError(f"parameter names must be 1 to {MAX_NAME_CHARS} characters, got {str(name)[:40]!r}")
            if not isinstance(entry, Mapping):
                raise SpaceError(f"{name}: expected an object with _type and _value, got {shown(entry)}")
            if "_type" not in entry:
                raise SpaceError(f"{name}: missing _type")
            if "_value" not in entry:
                raise SpaceError(f"{name}: missing _value")
            kind = TYPES.get(entry["_type"]) if isinstance(entry["_type"], str) else None
            if kind is None:
                raise SpaceError(f"{name}: unknown _type {shown(entry['_type'])} (supported: {', '.join(sorted(TYPES))})")
            params.append(kind.from_value(str(name), entry["_value"]))
            if WHEN in entry:
                whens[name] = entry[WHEN]
        by_name = {p.name: p for p in params}
        return cls(params, {name: Condition.from_value(name, when, by_name) for name, when in whens.items()})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SearchSpace:
        """Read a search-space JSON file; `SpaceError` naming the file if it is unreadable, too large or not JSON."""
        try:
            size = os.path.getsize(path)
            if size > MAX_FILE_BYTES:
                raise SpaceError(f"{path}: {size:,} bytes; a search-space file may have at most {MAX_FILE_BYTES:,}")
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
        except OSError as err:
            raise SpaceError(f"cannot read the search space {path}: {err.strerror or err}") from None
        except UnicodeDecodeError as err:
            raise SpaceError(f"{path} is not UTF-8 text: {err}") from None
        except RecursionError:
            raise SpaceError(f"{path} nests too deeply to be a search space") from None
        except ValueError as err:
            raise SpaceError(f"{path} is not valid JSON: {err}") from None
        return cls.from_json(spec)

    def to_json(self) -> dict[str, Any]:
        """The NNI search-space JSON this space was built from."""
        return {name: {"_type": p.type_name, "_value": p.spec,
                       **({WHEN: self._when[name].spec} if name in self._when else {})}
                for name, p in self._params.items()}

    @property
    def names(self) -> list[str]:
        """Parameter names in search-space order."""
        return list(self._params)

    @property
    def params(self) -> Mapping[str, Parameter]:
        """Read-only map from name to parameter, in search-space order."""
        return MappingProxyType(self._params)

    @property
    def conditions(self) -> Mapping[str, Condition]:
        """Read-only map from a conditional parameter's name to its condition."""
        return MappingProxyType(self._when)

    def active(self, name: str, config: Config) -> bool:
        """Whether parameter `name` matters in the valid `config` (see searchspace/condition.py)."""
        cond = self._when.get(name)
        return cond is None or cond.holds(self._params[cond.on], config)

    def least(self, name: str | None = None) -> Config:
        """Every parameter at its least value, except that the choices deciding whether `name` is active
        take their first value that makes it so."""
        config = {n: p.least for n, p in self._params.items()}
        cond = self._when.get(name) if name is not None else None
        if cond is not None:
            config[cond.on] = cond.first(self._params[cond.on])
        return config

    def with_inert(self, config: Mapping[str, Any]) -> Config:
        """`config` with each missing parameter that is inert in it at its least value (as `key` reads it): a
        configuration recorded before the space offered another family names only its own family's knobs."""
        out = dict(config)
        for name, cond in self._when.items():
            choice = self._params[cond.on]
            if name not in out and cond.on in out and choice.contains(out[cond.on]) and not cond.holds(choice, out):
                out[name] = copied(self._params[name].least)
        return out

    def __getitem__(self, name: str) -> Parameter:
        return self._params[name]

    def __len__(self) -> int:
        return len(self._params)

    def __repr__(self) -> str:
        return f"SearchSpace({self.to_json()!r})"

    @property
    def size(self) -> int:
        """Number of distinct configurations, inert values aside (an exact Python int; it can be far beyond 2**64)."""
        return self._distinct()

    def _distinct(self) -> int:
        deciding = {c.on for c in self._when.values()}
        free = math.prod(p.size for n, p in self._params.items() if n not in self._when and n not in deciding)
        for on in deciding:
            choice = self._params[on]
            free *= sum(math.prod(self._params[n].size for n, c in self._when.items()
                                  if c.on == on and choice.key(option) in c.keys)
                        for option in choice.options)
        return free

    @property
    def encode_width(self) -> int:
        """Length of every vector `encode` returns."""
        return sum(p.encode_width for p in self._params.values())

    def sample(self, rng: random.Random) -> Config:
        """A configuration drawn uniformly at random."""
        return {name: p.sample(rng) for name, p in self._params.items()}

    def sample_nearest(self, rng: random.Random) -> Config:
        """A draw moved to the nearest valid configuration (see `ConstrainedSpace`); here every draw is valid."""
        return self.sample(rng)

    def problems(self, config: Any) -> list[str]:
        """Everything wrong with `config`, one message per problem, each starting with the parameter name."""
        if not isinstance(config, Mapping):
            return [f"a configuration must be an object mapping parameter names to values, got {config!r}"]
        out = []
        if config.keys() != self._params.keys():  # names checked one by one only where they differ
            out = [f"{name}: missing" for name in self._params if name not in config]
            out += [f"{name}: unknown parameter (expected {', '.join(self._params)})"
                    for name in config if name not in self._params]
        for name, p in self._params.items():
            if name in config:
                reason = p.check(config[name])
                if reason is not None:
                    out.append(f"{name}: {reason}")
        return out

    def validate(self, config: Any) -> None:
        """Raise `SpaceError` naming every bad parameter of `config`; return quietly if it is valid."""
        problems = self.problems(config)
        if problems:
            raise SpaceError("; ".join(problems))

    def contains(self, config: Any) -> bool:
        """Whether `config` is a configuration of this space."""
        return not self.problems(config)

    def valid(self, config: Any) -> bool:
        """Whether `config` may be measured: here, whether it is a configuration of the space
        (`ConstrainedSpace` adds its rules)."""
        return self.contains(config)

    def repair(self, config: Config, rng: random.Random) -> Config:
        """A valid configuration near `config`: here `config` itself (`ConstrainedSpace` moves it)."""
        self.validate(config)
        return copy.deepcopy(config)

    def key(self, config: Config) -> tuple[Any, ...]:
        """A hashable canonical form of a valid configuration, for deduplication."""
        self.validate(config)
        return tuple(p.key(config[name] if self.active(name, config) else p.least) for name, p in self._params.items())

    def neighbours(self, config: Config) -> list[Config]:
        """The configurations that differ from `config` in one active parameter by one move."""
        self.validate(config)
        base, out = _values_copied(config), []  # the neighbours share their unchanged values
        for name, p in self._params.items():
            if self.active(name, config):
                out += [{**base, name: value} for value in p.neighbours(config[name])]
        return out

    def moves(self) -> list[Move]:
        """Every move of every parameter, as (name, move), in search-space order: a fixed action set."""
        return [(name, m) for name, p in self._params.items() for m in p.moves()]

    def moved(self, config: Config, move: Move) -> Config | None:
        """Where `move`, one of `moves()`, leads from `config`; None where it does not apply."""
        name, m = move
        if not self.active(name, config):
            return None
        param = self._params[name]
        value = param.move(config[name], m)
        return None if param.key(value) == param.key(config[name]) else {**_values_copied(config), name: value}

    def encode(self, config: Config) -> list[float]:
        """The parameters' encodings concatenated in search-space order (length `encode_width`)."""
        self.validate(config)
        return [x for name, p in self._params.items()
                for x in p.encode(config[name] if self.active(name, config) else p.least)]

    def values(self) -> Iterator[Config]:
        """Every configuration, lazily, inert parameters at their least value; `ValueError` when there are
        more than `MAX_ENUMERATION`."""
        count = self._distinct()
        if count > MAX_ENUMERATION:
            raise ValueError(f"{count} configurations are too many to enumerate (limit {MAX_ENUMERATION})")
        names, deciding = self.names, sorted({c.on for c in self._when.values()})
        for_each = [dict(zip(deciding, chosen))
                    for chosen in itertools.product(*(self._params[n].values() for n in deciding))]
        return ({n: copied(v) for n, v in zip(names, combo)} for fixed in for_each
                for combo in itertools.product(*([fixed[n]] if n in fixed else p.values() if self.active(n, fixed)
                                                 else [p.least] for n, p in self._params.items())))

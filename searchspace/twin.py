"""Twin spaces: the suite's search spaces in NNI's standard types, for NNI's built-in tuners.

NNI's built-in tuners (TPE, Random, Evolution, ...) reject `factor`, `discrete` and `perm`. `twin_space`
rewrites a space with `choice` only (TPE, Random, Evolution and GridSearch take it; GP and Metis refuse
choices of strings), and `from_twin` turns what such a tuner proposes back into a configuration of the
original space. Native
configurations pass through `from_twin` unchanged, so a trial can call it on whatever it is given and then
validate. Every twin value is a number or a string, as NNI's validation demands.

Encoding, per parameter (a "token" is a string no native value can equal, so decoding is unambiguous):

* factor with at most `TWIN_MAX_CHOICES` values: one `choice` over its factorisations as tokens
  "128x8x1". Exact, but the tuner sees the tilings as unordered categories.
* larger factor: one parameter per prime p^e of the product, named "<name>:<p>". When the splits of e over
  the parts are at most `TWIN_MAX_CHOICES`, it is a `choice` over them as tokens "3-1-0" (the exponent of
  p in each part); exact, since a factorisation is exactly one split per prime. Otherwise the prime gets
  one weight per part, "<name>:<p>:<i>", a `choice` over 0..e, and e is split in proportion to the
  weights (largest remainders first, ties to the earlier part; all-zero weights count as equal). Every
  combination decodes to a valid factorisation, a part's exponent grows with its own weight and no part
  is favoured, but several combinations decode to the same value, so NNI's deduplication cannot see
  those repeats.
* discrete: a `choice` over its numbers (the native values themselves).
* choice: itself when every option is a number or string; else a `choice` over the options' JSON texts,
  refused if one of those texts is also an option.
* perm with at most `TWIN_MAX_CHOICES` orderings: a `choice` over tokens "2-0-1". Larger: its Lehmer code,
  n-1 parameters "<name>:<i>", each a `choice` over 0..n-1-i (which of the remaining items comes next);
  exact and every combination valid.

A space of plain choices (numbers and strings only) is its own twin, whose proposals would read as native
configurations; its twin gets one more parameter, `MARKER` (a `choice` of 1), so that a proposal says it is
a built-in tuner's (trial/check.py repairs those that break the device's rules); `from_twin` drops it.
"""
from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from .choice import Choice
from .discrete import Discrete
from .errors import SpaceError
from .factor import Factor, _compositions
from .param import Parameter
from .perm import Perm
from .space import Config, SearchSpace

TWIN_MAX_CHOICES = 2000
"""Most options one twin `choice` lists; larger parameters are split into several twin parameters."""
MARKER = "twin"
"""The parameter that marks a proposal of a twin that would otherwise read as native."""


def _choice(values: list[Any]) -> dict[str, Any]:
    return {"_type": "choice", "_value": values}


class _Codec:
    """How one parameter is written in the twin, and read back from a twin-encoded parameter dict."""

    def __init__(self, param: Parameter) -> None:
        self.param = param

    def twin(self) -> dict[str, dict[str, Any]]:
        """The twin parameters standing for `param`."""
        return {self.param.name: _choice(self.param.values())}

    def decode(self, params: dict[str, Any]) -> None:
        """Replace the twin parameters in `params` by the native value where they decode; else leave them."""

    def restrict(self, allowed: list[Any]) -> dict[str, dict[str, Any]]:
        """The twin offering only the `allowed` values, where one choice stands for the parameter."""
        keys = {self.param.key(v) for v in allowed}
        return {self.param.name: _choice([v for v in self.param.values() if self.param.key(v) in keys])}


class _Tokens(_Codec):
    """One `choice` over strings standing for the values, in their canonical order."""

    def __init__(self, param: Parameter, tokens: list[str], values: list[Any] | None = None) -> None:
        super().__init__(param)
        self.tokens = tokens
        self.index = {t: i for i, t in enumerate(tokens)}
        self.values = param.values() if values is None else values
        """The values the tokens stand for, enumerated once (codecs are cached, see `_codecs`)."""

    def twin(self) -> dict[str, dict[str, Any]]:
        return {self.param.name: _choice(list(self.tokens))}

    def restrict(self, allowed: list[Any]) -> dict[str, dict[str, Any]]:
        keys = {self.param.key(v) for v in allowed}
        return {self.param.name: _choice([t for t, v in zip(self.tokens, self.values) if self.param.key(v) in keys])}

    def decode(self, params: dict[str, Any]) -> None:
        value = params.get(self.param.name)
        if isinstance(value, str) and value in self.index:
            params[self.param.name] = copy.deepcopy(self.values[self.index[value]])  # never the cached one


class _Split(_Codec):
    """Several twin parameters, all present or none; their absence means the config is native here."""

    def parts(self) -> dict[str, list[Any]]:
        """Twin name -> options."""
        raise NotImplementedError

    def assemble(self, chosen: dict[str, Any]) -> Any:
        """The native value for one option per twin name (each checked to be one of its options)."""
        raise NotImplementedError

    @functools.cached_property
    def _parts(self) -> dict[str, list[Any]]:
        """`parts()`, computed once for decoding (read only: `twin` hands out fresh ones)."""
        return self.parts()

    def twin(self) -> dict[str, dict[str, Any]]:
        return {name: _choice(options) for name, options in self.parts().items()}

    def restrict(self, allowed: list[Any]) -> dict[str, dict[str, Any]]:
        return self.twin()  # the parts are chosen independently: no subset of them stands for `allowed`

    def decode(self, params: dict[str, Any]) -> None:
        parts = self._parts
        if self.param.name in params or not all(
                name in params and _is_option(params[name], options) for name, options in parts.items()):
            return
        chosen = {name: params.pop(name) for name in parts}
        params[self.param.name] = self.assemble(chosen)


def _is_option(value: Any, options: list[Any]) -> bool:
    return any(type(value) is type(o) and value == o for o in options)


class _FactorPrimes(_Split):
    """A large factor: per prime, one choice over exponent splits, or one weight per part."""

    param: Factor

    def parts(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        name, parts = self.param.name, self.param.parts
        for p, e in self.param.primes:
            if math.comb(e + parts - 1, parts - 1) <= TWIN_MAX_CHOICES:
                out[f"{name}:{p}"] = ["-".join(map(str, c)) for c in _compositions(e, parts)]
            else:
                out.update({f"{name}:{p}:{i}": list(range(e + 1)) for i in range(parts)})
        return out

    def assemble(self, chosen: dict[str, Any]) -> list[int]:
        name, parts = self.param.name, self.param.parts
        value = [1] * parts
        for p, e in self.param.primes:
            if f"{name}:{p}" in chosen:
                exponents = [int(x) for x in chosen[f"{name}:{p}"].split("-")]
            else:
                exponents = _split([chosen[f"{name}:{p}:{i}"] for i in range(parts)], e)
            value = [v * p**k for v, k in zip(value, exponents)]
        return value


def _split(weights: list[int], total: int) -> list[int]:
    """`total` split into integers in proportion to `weights` (largest remainder; ties to earlier parts)."""
    if not any(weights):
        weights = [1] * len(weights)
    shares = [total * w / sum(weights) for w in weights]
    out = [math.floor(x) for x in shares]
    by_remainder = sorted(range(len(out)), key=lambda i: (out[i] - shares[i], i))
    for i in by_remainder[:total - sum(out)]:
        out[i] += 1
    return out


class _Lehmer(_Split):
    """A large perm as its Lehmer code: digit i picks which of the n - i remaining items comes next."""

    param: Perm

    def parts(self) -> dict[str, list[Any]]:
        n = self.param.n
        return {f"{self.param.name}:{i}": list(range(n - i)) for i in range(n - 1)}

    def assemble(self, chosen: dict[str, Any]) -> list[int]:
        items = list(range(self.param.n))
        return [items.pop(chosen[f"{self.param.name}:{i}"]) for i in range(self.param.n - 1)] + items


def _codec(param: Parameter) -> _Codec:
    if isinstance(param, Factor):
        if param.size <= TWIN_MAX_CHOICES:
            values = param.values()
            return _Tokens(param, ["x".join(map(str, v)) for v in values], values)
        return _FactorPrimes(param)
    if isinstance(param, Perm):
        if param.size <= TWIN_MAX_CHOICES:
            values = param.values()
            return _Tokens(param, ["-".join(map(str, v)) for v in values], values)
        return _Lehmer(param)
    if isinstance(param, Choice) and not all(isinstance(v, (str, int, float)) for v in param.options):
        tokens = [json.dumps(v, sort_keys=True) for v in param.options]
        if any(param.contains(t) for t in tokens):
            raise SpaceError(f"{param.name}: cannot encode the choices {param.options!r} for NNI: the JSON text "
                             "of one choice is another choice")
        return _Tokens(param, tokens)
    if isinstance(param, (Choice, Discrete)):
        return _Codec(param)
    raise SpaceError(f"{param.name}: no twin encoding for type {param.type_name!r}")


def _codecs(space: SearchSpace | Mapping[str, Any]) -> tuple[_Codec, ...]:
    """One codec per parameter; `SpaceError` if two of them would use the same twin parameter name.

    Cached per space (trials decode every configuration, and enumerating a parameter's values is the
    costly part): keyed on the space's JSON text when it is plain JSON, which then stands for it exactly.
    """
    spec = space.to_json() if isinstance(space, SearchSpace) else space
    key = _json_key(spec)
    if key is None:
        return _build_codecs(space)
    return _cached_codecs(key)


_JSON_SCALARS = (str, int, float, bool, type(None))


def _json_key(spec: Any) -> str | None:
    """The JSON text of `spec` if it is plain JSON (dicts with str keys, lists, finite scalars of exact
    types), so that the text determines the value exactly; else None."""
    def plain(v: Any) -> bool:
        if type(v) is dict:
            return all(type(k) is str and plain(x) for k, x in v.items())
        if type(v) is list:
            return all(plain(x) for x in v)
        return type(v) in _JSON_SCALARS

    if not plain(spec):
        return None
    try:
        return json.dumps(spec, allow_nan=False)
    except ValueError:
        return None


@functools.lru_cache(maxsize=64)
def _cached_codecs(key: str) -> tuple[_Codec, ...]:
    return _build_codecs(json.loads(key))


def _build_codecs(space: SearchSpace | Mapping[str, Any]) -> tuple[_Codec, ...]:
    model = space if isinstance(space, SearchSpace) else SearchSpace.from_json(space)
    codecs = tuple(_codec(p) for p in model.params.values())
    names: set[str] = set()
    for codec in codecs:
        for name in codec.twin():
            if name in names:
                raise SpaceError(f"{codec.param.name}: twin parameter {name!r} clashes with another parameter")
            names.add(name)
    return codecs


def twin_space(space: SearchSpace | Mapping[str, Any],
               allowed: Mapping[str, list[Any] | None] | None = None) -> dict[str, Any]:
    """The NNI standard-type search space standing for `space` (a `SearchSpace` or its JSON).

    `allowed`: per parameter, the only values to offer (e.g. `ConstrainedSpace.domains()`, the values a
    device's rules leave possible); a parameter written as several twin parameters (a large factor, a
    long permutation) offers all its values, since NNI's types choose each part on its own.
    `SpaceError` if the space cannot be written this way (a twin parameter name that clashes with a
    parameter of the space, or choices whose JSON texts are themselves choices).
    """
    allowed = allowed or {}
    codecs = _codecs(space)
    twin = {name: spec for codec in codecs
            for name, spec in (codec.twin() if allowed.get(codec.param.name) is None
                               else codec.restrict(allowed[codec.param.name])).items()}
    return {**twin, MARKER: _choice([1])} if _reads_as_native(codecs) else twin


def _reads_as_native(codecs: tuple[_Codec, ...]) -> bool:
    """Whether every parameter is its own twin (plain choices), unless a parameter is named `MARKER`."""
    return all(type(c) is _Codec for c in codecs) and all(c.param.name != MARKER for c in codecs)


def from_twin(space: SearchSpace | Mapping[str, Any], params: Mapping[str, Any]) -> Config:
    """The configuration of `space` that twin-encoded `params` stand for; native `params` come back unchanged.

    Decoding is per parameter, so a mix of both encodings works too. Anything that is neither (a missing or
    unknown value) is left as it is, for `SearchSpace.validate` to report. `SpaceError` as for `twin_space`.
    """
    codecs = _codecs(space)  # one per parameter, in search-space order
    out = dict(params)
    if _reads_as_native(codecs) and out.get(MARKER) == 1:
        del out[MARKER]
    for codec in codecs:
        codec.decode(out)
    ordered = {c.param.name: out.pop(c.param.name) for c in codecs if c.param.name in out}
    return {**ordered, **out}

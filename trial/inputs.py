"""Limits on what users type: JSON texts and numeric command-line options, with messages naming the input.

Python's json module accepts NaN and Infinity and recurses once per nesting level, so a hostile text
can smuggle non-finite numbers in or end in a RecursionError; `load_json` refuses both up front.
"""
from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

MAX_JSON_CHARS = 1 << 20
MAX_JSON_DEPTH = 32


class InputError(ValueError):
    """A user input that is malformed or out of range; the message names the input."""


def _depth(text: str) -> int:
    """Deepest nesting of brackets outside strings (a scan: json.loads would recurse to find out)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (not escaped and ch == "\\"), in_string and (escaped or ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json(text: str, what: str, max_chars: int = MAX_JSON_CHARS, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of `text`; InputError naming `what` if it is too long, too deep, not JSON or holds
    NaN or Infinity."""
    if len(text) > max_chars:
        raise InputError(f"{what} is {len(text):,} characters long; the limit is {max_chars:,}")
    if _depth(text) > max_depth:
        raise InputError(f"{what} nests deeper than {max_depth} levels")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as err:
        raise InputError(f"{what} is not valid JSON: {err}") from None


def number_type(kind: Callable[[str], float], low: float, high: float) -> Callable[[str], Any]:
    """An argparse `type` that accepts a finite `kind` (int or float) in [low, high]."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text[:40]!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be between {low:,} and {high:,}, got {text[:40]}")
        return value
    return parse

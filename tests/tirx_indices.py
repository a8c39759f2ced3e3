"""What a TIRx kernel (trial/templates/wgmma_kernel.py) writes to C and what its TMA copies load, for every thread
of the grid, read from the kernel's TIR without a GPU.

`trace` walks the PrimFunc as the threads run it, every thread of every CTA at once (numpy arrays over the grid's
threads, a mask for the branches each takes): loops run, `if`s split the mask, and each store to the output and
each `cp.async.bulk.tensor` records its indices (or coordinates) for the threads that reach it.  Only what the
indices depend on is evaluated (launch ids, loop variables, integer arithmetic, locals stored at constant
indices such as loop counters and a warp's shuffled value); a store or copy whose indices need anything else (a
value loaded at run time) raises.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm


class Unknown(Exception):
    """An expression whose value the trace does not know (run-time data)."""


@dataclass
class Copy:
    """The TMA copies of one tensor map: each copy's coordinates (innermost first) and the CTA that issued it."""

    coords: list[np.ndarray] = field(default_factory=list)  # one (copies, rank) array per call site and trip
    cta: list[np.ndarray] = field(default_factory=list)

    def all(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self.coords), np.concatenate(self.cta)


@dataclass
class Trace:
    """The threads' stores to the output buffer and their TMA copies, by tensor map name."""

    ctas: int  # CTAs of the grid (numbered as `cta` below)
    cluster_of: np.ndarray  # each CTA's cluster (its own number where the grid has no clusters)
    stores: list[np.ndarray] = field(default_factory=list)  # (stores, output rank) arrays
    store_cta: list[np.ndarray] = field(default_factory=list)
    copies: dict[str, Copy] = field(default_factory=dict)

    def stored(self) -> tuple[np.ndarray, np.ndarray]:
        """Every element store: its indices and the CTA that made it."""
        return np.concatenate(self.stores), np.concatenate(self.store_cta)


_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide,
           "FloorMod": np.mod, "Min": np.minimum, "Max": np.maximum, "EQ": np.equal, "NE": np.not_equal,
           "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal, "And": np.logical_and,
           "Or": np.logical_or}


def _value(expr: Any, env: dict[Any, Any]) -> Any:
    kind = type(expr).__name__
    if kind == "IntImm":
        return int(expr.value)
    if kind == "Var":
        if expr not in env:
            raise Unknown(expr.name)
        return env[expr]
    if kind in _BINARY:
        return _BINARY[kind](_value(expr.a, env), _value(expr.b, env))
    if kind in ("Div", "Mod"):  # C's truncating division
        a, b = np.asarray(_value(expr.a, env)), np.asarray(_value(expr.b, env))
        q = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
        return q if kind == "Div" else a - b * q
    if kind == "Not":
        return np.logical_not(_value(expr.a, env))
    if kind == "Cast" and str(expr.ty).startswith(("int", "uint")):
        return _value(expr.value, env)
    if kind == "Select":
        return np.where(_value(expr.condition, env), _value(expr.true_value, env), _value(expr.false_value, env))
    if kind == "TensorLoad" and _scalar(expr) in env:  # a local the kernel stored (`trace` keeps those it can)
        return env[_scalar(expr)]
    if kind == "Call" and expr.op.name.endswith("tvm_warp_shuffle"):  # each warp reads lane `args[2]`'s value
        value, lane = np.asarray(_value(expr.args[1], env)), int(_value(expr.args[2], env))
        return value if value.ndim == 0 else np.repeat(value.reshape(-1, 32)[:, lane], 32)
    if kind == "Call" and expr.op.name.endswith("if_then_else"):
        return np.where(*(_value(a, env) for a in expr.args))
    raise Unknown(f"{kind}: {expr}")


def _scalar(access: Any) -> Any:
    """The key of a buffer access at constant indices (a local variable of the kernel), or None."""
    if all(type(i).__name__ == "IntImm" for i in access.indices):
        buffer = access.buffer if type(access).__name__ == "BufferStore" else access.source
        return buffer.name, tuple(int(i.value) for i in access.indices)  # the kernel's locals have their own names
    return None


def _launch(func: Any) -> tuple[dict[Any, np.ndarray], int, np.ndarray]:
    """Every thread of the grid: the launch ids' values (arrays over the threads, the thread id fastest), the
    threads per CTA, and each CTA's cluster (its own number where the grid has no clusters)."""
    defs = []

    def visit(node: Any) -> None:
        if type(node).__name__ == "ScopeIdDefStmt":
            d = getattr(node, "def")  # printed as T.ScopeIdDef([ids], [extents], "parent", "scope")
            defs.append((list(d.def_ids), [int(e) for e in d.extents], str(d).rsplit("[", 1)[1]))

    _visit(func.body, visit)
    assert defs and defs[-1][2].endswith('"cta", "thread")'), defs  # the thread id innermost
    ids = [v for vars_, _, _ in defs for v in vars_]
    grid = np.array(list(itertools.product(*[range(e) for _, ext, _ in defs for e in ext])), dtype=np.int64)
    env = {v: grid[:, i] for i, v in enumerate(ids)}
    threads = defs[-1][1][0]
    clusters = [vars_[0] for vars_, _, scope in defs if scope.endswith('"kernel", "cluster")')]
    cluster = env[clusters[0]][::threads] if clusters else np.arange(len(grid) // threads)
    return env, threads, cluster


def _visit(stmt: Any, fn: Any) -> None:
    """Post-order visit of the statements (ScopeIdDefStmt is all `_launch` looks for)."""
    for child in _children(stmt):
        _visit(child, fn)
    fn(stmt)


def _children(stmt: Any) -> list[Any]:
    kind = type(stmt).__name__
    if kind == "SeqStmt":
        return list(stmt.seq)
    if kind == "IfThenElse":
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    return [stmt.body] if hasattr(stmt, "body") and isinstance(stmt.body, tvm.tirx.Stmt) else []


def trace(func: Any, output: str = "C") -> Trace:
    """Run `func`'s index arithmetic for every thread of its grid (see the module's docstring)."""
    env, threads, cluster = _launch(func)
    lanes = len(next(iter(env.values())))
    cta = np.arange(lanes) // threads
    result = Trace(ctas=lanes // threads, cluster_of=cluster)

    def at(values: list[Any], mask: np.ndarray) -> np.ndarray:
        return np.stack([np.broadcast_to(np.asarray(v, dtype=np.int64), (lanes,))[mask] for v in values], axis=1)

    def run(stmt: Any, mask: np.ndarray) -> None:
        kind = type(stmt).__name__
        if not mask.any():
            return
        if kind == "SeqStmt":
            for s in stmt.seq:
                run(s, mask)
        elif kind == "Bind":
            try:
                env[stmt.var] = _value(stmt.value, env)
            except Unknown:
                env.pop(stmt.var, None)
        elif kind == "For":
            start, extent = _value(stmt.min, env), _value(stmt.extent, env)
            for i in range(int(start), int(start) + int(extent)):
                env[stmt.loop_var] = i
                run(stmt.body, mask)
        elif kind == "IfThenElse":
            cond = np.broadcast_to(np.asarray(_value(stmt.condition, env), dtype=bool), (lanes,))
            run(stmt.then_case, mask & cond)
            if stmt.else_case is not None:
                run(stmt.else_case, mask & ~cond)
        elif kind == "BufferStore" and stmt.buffer.name == output:
            result.stores.append(at([_value(i, env) for i in stmt.indices], mask))
            result.store_cta.append(cta[mask])
        elif kind == "BufferStore" and _scalar(stmt) is not None:  # a local: its value where the mask holds
            key = _scalar(stmt)
            try:
                value = _value(stmt.value, env)
                env[key] = np.where(mask, value, env[key]) if key in env else value
            except Unknown:
                env.pop(key, None)
        elif kind == "Evaluate" and "cp_async_bulk_tensor" in str(getattr(stmt.value, "op", "")):
            args = stmt.value.args
            rank = int(next(a.value for a in args if type(a).__name__ == "StringImm" and a.value.endswith("d")
                            and a.value[:-1].isdigit())[:-1])
            names: list[str] = []
            _visit_expr(args[1], names)
            copy = result.copies.setdefault(names[0], Copy())
            copy.coords.append(at([_value(a, env) for a in args[2:2 + rank]], mask))
            copy.cta.append(cta[mask])
        elif hasattr(stmt, "body") and isinstance(stmt.body, tvm.tirx.Stmt):
            run(stmt.body, mask)

    run(func.body, np.ones(lanes, dtype=bool))
    return result


def _visit_expr(expr: Any, names: list[str]) -> None:
    """The names of the variables in `expr` (the tensor map of a copy's second argument)."""
    if type(expr).__name__ == "Var":
        names.append(expr.name)
    for arg in getattr(expr, "args", []):
        _visit_expr(arg, names)

"""Winograd conv2d for stride-1 3x3 and 5x5 kernels: F(4x4, r x r) (trial/winograd.py) in four stages,
each its own kernel on GPUs, with a = r + 3 and the m x m output tiles p = (image, tile row, tile column):
  filter transform  U[e, f, c] = (G w[f, c] G^T)[e]                      e: the a x a positions
  input transform   V[e, c, p] = (B^T d[c, p] B)[e]                      d: the a x a window of tile p
  batched product   M[e, f, p] = sum_c U[e, f, c] V[e, c, p]             matmul's schedule, `wino_*` knobs
  output transform  out[n, f, y, x] = (A^T M[:, f, p] A)[y mod 4, x mod 4]
The product does (a / 4)^2 / r^2 of a direct convolution's multiplications (0.25x for 3x3, 0.16x for 5x5);
the transforms are cheap in arithmetic but move the a^2 (C + F) x tiles floats of V and M through global
memory.  The filter transform runs on every call, as a library called with plain weights would.  The
tile count is padded to a multiple of `TILE_ALIGN`, so that the product's factor knobs have many splits
(the extra tiles transform windows of the last image, and their columns of M are never read).

Knobs (conv2d.py offers them under its `algorithm` choice), matmul's over the product's batch e, filters f,
tiles p and channels c:
  wino_f    factor [F, 4]        filters: block, virtual thread, thread, inner      (matmul's X)
  wino_p    factor [tiles, 4]    tiles: block, virtual thread, thread, inner        (matmul's Y)
  wino_c    factor [C, 3]        channels: shared-memory stage, register stage, inner (matmul's K, no split)
  wino_e    factor [a^2, 2]      positions: block, inner                             (matmul's B)
  wino_unroll, wino_vec, wino_pipeline, wino_kmajor, wino_pad                      (matmul's)
The transforms give each thread one tile (all its positions unrolled, so the matrices fold into constants),
`TRANSFORM_THREADS` to a block.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import winograd
from ..constraints import Rule
from ..workload import MAX_ELEMENTS, Workload
from . import matmul
from .common import PIPELINE_DEPTHS, factor_knob, greedy_split, loop_depth

if TYPE_CHECKING:
    import tvm
    from tvm import s_tir

    from ..target import Target

TILE_ALIGN = 32
STORE_WIDTHS = (2, 4)  # the tile counts (multiples of TILE_ALIGN) keep such vectors of M aligned
TRANSFORM_THREADS = 128
KNOBS = {"wino_f": "X", "wino_p": "Y", "wino_e": "B", "wino_unroll": "unroll", "wino_vec": "vec",
         "wino_pipeline": "pipeline", "wino_kmajor": "kmajor", "wino_pad": "pad"}
"""This template's knobs as matmul's (wino_c becomes matmul's K with an unsplit first part)."""


def applies(wl: Workload) -> bool:
    """Whether `wl` is a convolution this template computes: stride 1, a kernel with a tile in trial/winograd.py,
    and transformed tensors that a 32-bit index reaches (as the workload's own, trial/workload.py)."""
    d = wl.dims
    if wl.op != "conv" or d["ST"] != 1 or d["K"] not in winograd.TILE:
        return False
    s = shape(wl)
    return s["a"] ** 2 * max(d["F"], d["C"]) * s["tiles"] <= MAX_ELEMENTS


@functools.lru_cache(maxsize=64)
def shape(wl: Workload) -> dict[str, int]:
    """m, r, a and the tile grid: `side` tiles per image side, `tiles` (padded) in all."""
    r = wl.dims["K"]
    m = winograd.TILE[r]
    side = -(-wl.out_hw // m)
    return {"m": m, "r": r, "a": m + r - 1, "side": side,
            "tiles": -(-wl.dims["N"] * side * side // TILE_ALIGN) * TILE_ALIGN}


@functools.lru_cache(maxsize=64)
def product(wl: Workload) -> Workload:
    """The batched product M = U V as a bmm workload (matmul.py's knobs and rules apply to it)."""
    s, d = shape(wl), wl.dims
    dims = {"B": s["a"] ** 2, "N": d["F"], "K": d["C"], "M": s["tiles"]}
    return Workload("bmm", "".join(f"{k}{v}" for k, v in dims.items()), dims)


def product_params(p: dict[str, Any]) -> dict[str, Any]:
    """The product's knobs under matmul's names."""
    return {"K": [1, *p["wino_c"]], **{mine: p[name] for name, mine in KNOBS.items()}}


def search_space(wl: Workload) -> dict[str, Any]:
    s, d = shape(wl), wl.dims
    return {"wino_f": factor_knob(d["F"], 4), "wino_p": factor_knob(s["tiles"], 4),
            "wino_c": factor_knob(d["C"], 3), "wino_e": factor_knob(s["a"] ** 2, 2),
            "wino_unroll": {"_type": "discrete", "_value": matmul.UNROLL_STEPS},
            "wino_vec": {"_type": "discrete", "_value": matmul.VECTOR_WIDTHS},
            "wino_pipeline": {"_type": "discrete", "_value": PIPELINE_DEPTHS},
            "wino_kmajor": {"_type": "discrete", "_value": matmul.KMAJOR},
            "wino_pad": {"_type": "discrete", "_value": matmul.PADS}}


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """A hand-picked config: 64 filters x 128 tiles per block of 8 x 16 threads on GPUs, as matmul's."""
    s, d = shape(wl), wl.dims
    if gpu:
        return {"wino_f": greedy_split(d["F"], [2, 8, 4]), "wino_p": greedy_split(s["tiles"], [2, 16, 4]),
                "wino_c": greedy_split(d["C"], [8, 1]), "wino_e": [s["a"] ** 2, 1], "wino_unroll": 512,
                "wino_vec": 4, "wino_pipeline": 2, "wino_kmajor": 1, "wino_pad": 4}
    return {"wino_f": greedy_split(d["F"], [1, 8, 4]), "wino_p": greedy_split(s["tiles"], [1, 4, 16]),
            "wino_c": greedy_split(d["C"], [4, 4]), "wino_e": [s["a"] ** 2, 1], "wino_unroll": 16,
            "wino_vec": 1, "wino_pipeline": 0, "wino_kmajor": 0, "wino_pad": 0}


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """The most any of the four kernels' blocks uses: the product's, or a transform's threads and the
    registers of its tile (the input window and its half-transformed copy)."""
    a = shape(wl)["a"]
    used = matmul.resources(product(wl), product_params(p))
    return {**used, "threads": max(used["threads"], TRANSFORM_THREADS),
            "thread_dims": (max(used["thread_dims"][0], TRANSFORM_THREADS), *used["thread_dims"][1:]),
            "registers_per_thread": max(used["registers_per_thread"], 2 * a * a + 16)}


def rules(wl: Workload) -> list[Rule]:
    """matmul's vector rule, on the product."""
    gemm = product(wl)
    return [Rule(lambda r, c, rule=rule: rule.use(r, product_params(c)), rule.limit,
                 lambda r, c, rule=rule: rule.message(r, product_params(c)), rule.grows)
            for rule in matmul.rules(gemm)]


def _entry(matrix: np.ndarray, i: Any, j: Any) -> tvm.tirx.PrimExpr:
    """matrix[i, j] as a float32 expression of constants, which folds to one once i and j are unrolled."""
    from tvm import tirx

    expr = tirx.const(0.0, "float32")
    for (row, col), value in np.ndenumerate(matrix):
        if value:
            expr = tirx.Select(tirx.all(i == row, j == col), tirx.const(float(value), "float32"), expr)
    return expr


def prim_func(wl: Workload) -> tvm.tirx.PrimFunc:
    """The four stages (see the module's docstring), with the padded input and half-transformed tiles."""
    import tvm
    from tvm import te

    d, s = wl.dims, shape(wl)
    m, r, a, side = s["m"], s["r"], s["a"], s["side"]
    a_t, b_t, g = winograd.matrices(m, r)
    size, pad_width = d["HW"], d["PD"]
    data = te.placeholder(wl.input_shapes[0], "float32", name="data")
    weight = te.placeholder(wl.input_shapes[1], "float32", name="weight")
    rows = side * m + r - 1

    def pad_value(n, c, y, x):
        inside = tvm.tirx.all(y >= pad_width, y < size + pad_width, x >= pad_width, x < size + pad_width)
        return tvm.tirx.if_then_else(inside, data[n, c, y - pad_width, x - pad_width], tvm.tirx.const(0, "float32"))

    padded = te.compute((d["N"], d["C"], rows, rows), pad_value, name="pad")
    r1, r2 = te.reduce_axis((0, r), "r1"), te.reduce_axis((0, r), "r2")
    U = te.compute((a * a, d["F"], d["C"]), lambda e, f, c: te.sum(
        _entry(g, e // a, r1) * weight[f, c, r1, r2] * _entry(g, e % a, r2), axis=[r1, r2]), name="filter_transform")

    def window(c, p, i, j):
        """Tile p's window; the tiles that pad the count read the last image's (their M is never read)."""
        n, t = tvm.te.min(p // (side * side), d["N"] - 1), p % (side * side)
        return padded[n, c, t // side * m + i, t % side * m + j]

    b = te.reduce_axis((0, a), "b")
    half = te.compute((d["C"], s["tiles"], a, a), lambda c, p, i, e2: te.sum(
        window(c, p, i, b) * _entry(b_t, e2, b), axis=b), name="input_half")
    i = te.reduce_axis((0, a), "i")
    V = te.compute((a * a, d["C"], s["tiles"]), lambda e, c, p: te.sum(
        _entry(b_t, e // a, i) * half[c, p, i, e % a], axis=i), name="input_transform")
    k = te.reduce_axis((0, d["C"]), "k")
    M = te.compute((a * a, d["F"], s["tiles"]), lambda e, f, p: te.sum(U[e, f, k] * V[e, k, p], axis=k), name="C")
    e2 = te.reduce_axis((0, a), "e2")
    out_half = te.compute((d["F"], s["tiles"], a, m), lambda f, p, e1, x: te.sum(
        M[e1 * a + e2, f, p] * _entry(a_t, x, e2), axis=e2), name="output_half")
    e1 = te.reduce_axis((0, a), "e1")

    def inverse(n, f, y, x):
        p = (n * side + y // m) * side + x // m
        return te.sum(_entry(a_t, y % m, e1) * out_half[f, p, e1, x % m], axis=e1)

    out = te.compute(wl.output_shape, inverse, name="conv")
    return te.create_prim_func([data, weight, out])


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(wl))
    written = matmul.schedule_product(sch, sch.get_sblock("C"), product(wl), product_params(p), target)
    if target.is_gpu and p["wino_p"][3] in STORE_WIDTHS:  # M, written once and read once, in vector stores
        sch.vectorize(sch.get_loops(written)[-1])  # of a thread's wino_p[3] adjacent tiles
    _filter_transform(sch, target)
    _input_transform(sch, target)
    _output_transform(sch, target, shape(wl)["m"])
    return sch.mod


def _filter_transform(sch: s_tir.Schedule, target: Target) -> None:
    """A thread per (filter, channel): its r x r weights in registers, then every position e."""
    U = sch.get_sblock("filter_transform")
    e, f, c, r1, r2 = sch.get_loops(U)
    sch.reorder(f, c, e, r1, r2)
    sch.compute_at(sch.cache_read(U, 0, "local"), c)
    _accumulate_in_register(sch, U, e)
    _unroll_below(sch, _per_thread(sch, [f, c], target))


def _input_transform(sch: s_tir.Schedule, target: Target) -> None:
    """A thread per (channel, tile), consecutive threads on consecutive tiles (V's rows coalesce): the a x a
    window (padding folded in) and its half transform in registers, then every position e."""
    V = sch.get_sblock("input_transform")
    e, c, p, i = sch.get_loops(V)
    sch.reorder(c, p, e, i)
    for stage in ("input_half", "pad"):
        block = sch.get_sblock(stage)
        sch.compute_at(block, p)
        sch.set_scope(block, 0, "local")
    _accumulate_in_register(sch, V, e)
    _unroll_below(sch, _per_thread(sch, [c, p], target))


def _output_transform(sch: s_tir.Schedule, target: Target, m: int) -> None:
    """A thread per m x m output tile: its a x a products and their half transform in registers, then the
    tile's outputs (the last tiles of a row or column cut at the image's edge)."""
    out = sch.get_sblock("conv")
    n, f, y, x, _ = sch.get_loops(out)
    ty, iy = sch.split(y, [None, m])
    tx, ix = sch.split(x, [None, m])
    sch.reorder(n, f, ty, tx, iy, ix)
    half = sch.get_sblock("output_half")
    sch.compute_at(half, tx)
    sch.set_scope(half, 0, "local")
    sch.compute_at(sch.cache_read(half, 0, "local"), tx)
    _accumulate_in_register(sch, out, ix)
    _unroll_below(sch, _per_thread(sch, [n, f, ty, tx], target))


def _per_thread(sch: s_tir.Schedule, loops: list[Any], target: Target) -> Any:
    """`loops` (everything of the stage already inside the last) fused and spread over threads,
    `TRANSFORM_THREADS` a block (parallel chunks on the CPU); the thread's loop.  Split last, so that every
    block inside gets the predicate of a count that threads do not divide."""
    blocks, thread = sch.split(sch.fuse(*loops), [None, TRANSFORM_THREADS])
    if target.is_gpu:
        sch.bind(blocks, "blockIdx.x")
        sch.bind(thread, "threadIdx.x")
    else:
        sch.parallel(blocks)
    return thread


def _accumulate_in_register(sch: s_tir.Schedule, block: Any, loop: Any) -> None:
    """`block` sums each output in a register, stored once, inside `loop` (its last loop over outputs)."""
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), loop)


def _unroll_below(sch: s_tir.Schedule, thread: Any) -> None:
    """Unroll every loop inside `thread`, so that the transform matrices' entries fold into constants."""
    seen: list[Any] = []
    for block in sch.get_child_blocks(thread):
        for loop in sch.get_loops(block)[loop_depth(sch, block, thread):]:
            if not any(sch.get(loop).same_as(done) for done in seen):
                seen.append(sch.get(loop))
                sch.unroll(loop)

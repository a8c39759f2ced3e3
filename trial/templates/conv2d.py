"""Conv2d, NCHW: out[n, f, y, x] = sum_{rc, ry, rx} pad(data)[n, rc, y*S + ry, x*S + rx] * w[f, rc, ry, rx].

Two algorithms, chosen by the knob `algorithm` where both apply (stride 1, 3x3 and 5x5 kernels):
`direct` (below) and `winograd` (conv2d_winograd.py, its knobs `wino_*`); each family's knobs matter only
under its own choice (`_when`, searchspace/condition.py).  Elsewhere the space is the direct one alone.

Direct convolution's knobs (those of the original OpEvo study, plus `tile_n` and `pipeline`):
  tile_n, tile_f             factor [N | F, 4]        images / output filters: block, virtual thread,
                                                      thread, inner (a block of several images reuses
                                                      its filter slice across them)
  tile_y, tile_x             factor [OH | OW, 4]      output rows / columns: the same four levels
  tile_rc, tile_ry, tile_rx  factor [C | K | K, 2]    reduction over channels / kernel rows /
                             kernel columns: outer (shared-memory stage), inner
  auto_unroll_max_step       discrete [0, 125, 256]   auto-unroll budget (0 = off)
  unroll_explicit            choice [0, 1]            unroll in TIR (1) or leave it to the compiler (0)
  pipeline                   discrete [0, 1, 2, 3, 4] shared-memory stage: single buffer, double buffer,
                                                      2, 3 or 4 buffers filled by cp.async (CUDA sm_80+)

GPU: each thread block owns a tile of the output; per (rc, ry, rx) outer step (one fused loop, so
the stages can be pipelined across all of them) it stages the input
window and the filter slice it needs in shared memory (padding folded into the load) and each thread
accumulates tile_n[1]*tile_n[3] x tile_f[1]*tile_f[3] x tile_y[1]*tile_y[3] x tile_x[1]*tile_x[3] outputs in
registers; images and filters share the z axes of the grid, virtual threads and threads.
CPU: the same tiles; (n, f, y) outer tiles run in parallel, the tile_x[3] columns are vectorised;
`pipeline` has no CPU meaning.  A block whose shared tiles exceed the device's static limit keeps
them in dynamic shared memory (`shared_scope`), up to the device's opt-in maximum.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..constraints import Rule
from ..workload import Workload
from . import conv2d_winograd as winograd
from .common import (PIPELINE_DEPTHS, bind_tiles, factor_knob, greedy_split, pipeline_buffers, shared_scope,
                     stage_inputs, unroll)

if TYPE_CHECKING:
    import tvm

    from ..target import Target

UNROLL_STEPS = [0, 125, 256]
ALGORITHMS = ["direct", "winograd"]


def algorithm(wl: Workload, p: dict[str, Any]) -> str:
    """How the kernel of `p` computes: "direct" or "winograd" (its rounding differs: trial/verify.py)."""
    return p.get("algorithm", "direct")


def search_space(wl: Workload) -> dict[str, Any]:
    direct = _direct_space(wl)
    if not winograd.applies(wl):
        return direct

    def under(name: str, knobs: dict[str, Any]) -> dict[str, Any]:
        return {knob: {**spec, "_when": {"algorithm": [name]}} for knob, spec in knobs.items()}

    return {"algorithm": {"_type": "choice", "_value": ALGORITHMS}, **under("direct", direct),
            **under("winograd", winograd.search_space(wl))}


def upgrade(wl: Workload, params: dict[str, Any]) -> dict[str, Any]:
    """Recorded knobs as this version takes them, since records outlive knob changes: a config recorded
    before `algorithm` is a direct one, a direct one recorded before `tile_n` gave each block one image
    (`tile_n` [N, 1, 1, 1]), and a Winograd one recorded before `wino_kmajor` and `wino_pad` measured the
    kernel they build at 0 (as matmul's `upgrade`).  The knobs of the family not chosen, inert, are the
    space's to fill in (`SearchSpace.with_inert`)."""
    if algorithm(wl, params) == "winograd":
        return {**params, **{name: 0 for name in ("wino_kmajor", "wino_pad") if name not in params}}
    direct = {"tile_n": [wl.dims["N"], 1, 1, 1], **params}
    return {**direct, "algorithm": "direct"} if winograd.applies(wl) else direct


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """The hand-picked configs of both algorithms; on GPUs Winograd where it applies."""
    direct = _direct_defaults(wl, gpu)
    if not winograd.applies(wl):
        return direct
    return {"algorithm": "winograd" if gpu else "direct", **direct, **winograd.default_params(wl, gpu)}


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    return winograd.resources(wl, p) if algorithm(wl, p) == "winograd" else _direct_resources(wl, p)


def rules(wl: Workload) -> list[Rule]:
    """Each algorithm's rules, which hold where that algorithm is chosen."""
    def only(name: str, rule: Rule) -> Rule:
        return Rule(lambda r, c: rule.use(r, c) if algorithm(wl, c) == name else 0.0, rule.limit, rule.message,
                    grows=False)

    return [*(only("direct", r) for r in unrolled_pipeline_rules(wl)),
            *((only("winograd", r) for r in winograd.rules(wl)) if winograd.applies(wl) else ())]


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    if algorithm(wl, p) == "winograd":
        return winograd.schedule(wl, p, target)
    return _direct_schedule(wl, p, target)


def _direct_space(wl: Workload) -> dict[str, Any]:
    d, out = wl.dims, wl.out_hw
    return {"tile_n": factor_knob(d["N"], 4), "tile_f": factor_knob(d["F"], 4), "tile_y": factor_knob(out, 4),
            "tile_x": factor_knob(out, 4), "tile_rc": factor_knob(d["C"], 2),
            "tile_ry": factor_knob(d["K"], 2), "tile_rx": factor_knob(d["K"], 2),
            "auto_unroll_max_step": {"_type": "discrete", "_value": UNROLL_STEPS},
            "unroll_explicit": {"_type": "choice", "_value": [0, 1]},
            "pipeline": {"_type": "discrete", "_value": PIPELINE_DEPTHS}}


def _direct_defaults(wl: Workload, gpu: bool) -> dict[str, Any]:
    """A hand-picked config.  GPUs: a block takes an output row of two images and up to 64 filters; each of
    its threads 8 filters x up to 8 columns of both images, so that a filter slice staged in shared memory
    serves twice the outputs.  CPUs: 8-wide rows of one image."""
    d, out = wl.dims, wl.out_hw
    if gpu:
        tiles = {"tile_n": greedy_split(d["N"], [1, 1, 2]), "tile_f": greedy_split(d["F"], [1, 8, 8]),
                 "tile_y": greedy_split(out, [1, 1, 1]), "tile_x": greedy_split(out, [1, 16, 8])}
    else:
        tiles = {"tile_n": [d["N"], 1, 1, 1], "tile_f": greedy_split(d["F"], [1, 1, 4]),
                 "tile_y": greedy_split(out, [1, 1, 1]), "tile_x": greedy_split(out, [1, 1, 8])}
    return {**tiles, "tile_rc": greedy_split(d["C"], [8]), "tile_ry": [d["K"], 1], "tile_rx": [1, d["K"]],
            "auto_unroll_max_step": 256 if gpu else 125, "unroll_explicit": 1, "pipeline": int(gpu)}


def prim_func(wl: Workload) -> tvm.tirx.PrimFunc:
    import tvm
    from tvm import te

    d = wl.dims
    s, pad_width, size = d["ST"], d["PD"], d["HW"]
    data = te.placeholder(wl.input_shapes[0], wl.dtype, name="data")
    weight = te.placeholder(wl.input_shapes[1], wl.dtype, name="weight")
    padded = data
    if pad_width:
        def pad_value(n, c, y, x):
            inside = tvm.tirx.all(y >= pad_width, y < size + pad_width, x >= pad_width, x < size + pad_width)
            return tvm.tirx.if_then_else(inside, data[n, c, y - pad_width, x - pad_width],
                                        tvm.tirx.const(0, wl.dtype))
        padded = te.compute((d["N"], d["C"], size + 2 * pad_width, size + 2 * pad_width), pad_value, name="pad")
    rc = te.reduce_axis((0, d["C"]), name="rc")
    ry = te.reduce_axis((0, d["K"]), name="ry")
    rx = te.reduce_axis((0, d["K"]), name="rx")
    out = te.compute(wl.output_shape,
                     lambda n, f, y, x: te.sum(padded[n, rc, y * s + ry, x * s + rx] * weight[f, rc, ry, rx],
                                               axis=[rc, ry, rx]), name="conv")
    return te.create_prim_func([data, weight, out])


def _direct_resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """What one thread block of the GPU schedule uses: threads, shared bytes, registers per thread."""
    n, f, y, x = p["tile_n"], p["tile_f"], p["tile_y"], p["tile_x"]
    rc, ry, rx = p["tile_rc"][1], p["tile_ry"][1], p["tile_rx"][1]
    s = wl.dims["ST"]
    item = np.dtype(wl.dtype).itemsize
    window = math.prod(n[1:]) * rc * ((math.prod(y[1:]) - 1) * s + ry) * ((math.prod(x[1:]) - 1) * s + rx)
    filters = math.prod(f[1:]) * rc * ry * rx
    accumulators = n[1] * n[3] * f[1] * f[3] * y[1] * y[3] * x[1] * x[3]
    return {"threads": n[2] * f[2] * y[2] * x[2], "thread_dims": (x[2], y[2], n[2] * f[2]),
            "shared_bytes": (window + filters) * item * pipeline_buffers(p["pipeline"]),
            "registers_per_thread": accumulators + 16, "async_copy": p["pipeline"] >= 2}


def unrolled_pipeline_rules(wl: Workload) -> list[Rule]:
    """Three or four cp.async buffers wait for a count of copies that falls as the pipeline drains; with the
    auto-unroll left to the compiler (`unroll_explicit` 0) that count stays a loop variable, and TVM's CUDA
    code generation needs a constant there (it fails the build)."""
    def drains_in_a_loop(c: dict[str, Any]) -> bool:
        return pipeline_buffers(c["pipeline"]) >= 3 and c["auto_unroll_max_step"] > 0 and not c["unroll_explicit"]

    return [Rule(lambda r, c: float(drains_in_a_loop(c)), 0.0, grows=False,
                 message=lambda r, c: f"pipeline {c['pipeline']} ({pipeline_buffers(c['pipeline'])} cp.async buffers) "
                                      f"with auto_unroll_max_step {c['auto_unroll_max_step']} needs unroll_explicit 1: "
                                      f"TVM's CUDA code generation needs the drained pipeline's wait counts unrolled")]


def _direct_schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    from tvm import s_tir

    gpu = target.is_gpu
    sch = s_tir.Schedule(prim_func(wl))
    if wl.dims["PD"] and not gpu:
        sch.compute_inline(sch.get_sblock("pad"))
    conv = sch.get_sblock("conv")
    n, f, y, x, rc, ry, rx = sch.get_loops(conv)
    n0, n1, n2, n3 = sch.split(n, p["tile_n"])
    f0, f1, f2, f3 = sch.split(f, p["tile_f"])
    y0, y1, y2, y3 = sch.split(y, p["tile_y"])
    x0, x1, x2, x3 = sch.split(x, p["tile_x"])
    rc0, rc1 = sch.split(rc, p["tile_rc"])
    ry0, ry1 = sch.split(ry, p["tile_ry"])
    rx0, rx1 = sch.split(rx, p["tile_rx"])
    sch.reorder(n0, f0, y0, x0, n1, f1, y1, x1, n2, f2, y2, x2, rc0, ry0, rx0, rc1, ry1, rx1, n3, f3, y3, x3)
    r0 = sch.fuse(rc0, ry0, rx0)
    local = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(local, x2)
    if gpu:
        outer, threads = bind_tiles(sch, [(n0, n1, n2), (f0, f1, f2), (y0, y1, y2), (x0, x1, x2)],
                                    [p["tile_n"], p["tile_f"], p["tile_y"], p["tile_x"]])
        scope = shared_scope(target, _direct_resources(wl, p)["shared_bytes"])
        stage_inputs(sch, conv, r0, threads, scope, p["pipeline"], bool(wl.dims["PD"]))
    else:
        outer = sch.fuse(n0, f0, y0)
        sch.parallel(outer)
        if p["tile_x"][3] > 1:
            sch.vectorize(x3)
            sch.vectorize(sch.get_loops(local)[-1])
    unroll(sch, outer, p["auto_unroll_max_step"], bool(p["unroll_explicit"]))
    sch.decompose_reduction(conv, r0)
    return sch.mod

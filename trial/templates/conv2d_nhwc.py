"""Conv2d in the tensor-core types (float16, bfloat16, TF32), NHWC as PyTorch's channels_last runs it:
out[n, y, x, f] = sum_{ry, rx, rc} pad(data)[n, y*S + ry, x*S + rx, rc] * w[f, ry, rx, rc], the products
summed in float32 and the sum written in the output type (float16 and bfloat16 in their own, TF32 in float32).

This is the direct convolution of conv2d.py on NHWC tensors, on the CUDA cores and the CPU: the kernel of every
typed convolution on the CPU (where CI verifies them) and on GPUs, but for those conv2d_gemm.py takes on Hopper.

Knobs:
  tile_n, tile_y, tile_x, tile_f  factor [N | OH | OW | F, 4]  images / output rows / output columns /
                                                              filters: block, virtual thread, thread, inner
  tile_ry, tile_rx, tile_rc       factor [K | K | C, 2]       reduction over kernel rows / kernel columns /
                                                              channels: outer (shared-memory stage), inner
  auto_unroll_max_step            discrete [0, 125, 256]      auto-unroll budget (0 = off)
  unroll_explicit                 choice [0, 1]               unroll in TIR (1) or leave it to the compiler (0)
  pipeline                        discrete [0, 1, 2, 3, 4]    shared-memory stage: single buffer, double
                                                              buffer, 2, 3 or 4 buffers filled by cp.async

GPU: each thread block owns an output tile; filters, the innermost (contiguous) axis of the output and of the
weights, go to threadIdx.x, so that neighbouring threads store neighbouring outputs.  Per outer reduction step
the block stages its input window and weight slice in shared memory (padding folded into the load); each thread
sums its outputs in float32 registers and rounds them once, as it stores them.  CPU: (n, y, x) outer tiles in
parallel, the tile_f[3] filters vectorised.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..constraints import Rule
from ..workload import Workload
from .common import (PIPELINE_DEPTHS, bind_tiles, factor_knob, greedy_split, pipeline_buffers, shared_scope,
                     stage_inputs, unroll)
from .conv2d import UNROLL_STEPS, unrolled_pipeline_rules

if TYPE_CHECKING:
    import tvm

    from ..target import Target


def search_space(wl: Workload) -> dict[str, Any]:
    d, out = wl.dims, wl.out_hw
    return {"tile_n": factor_knob(d["N"], 4), "tile_y": factor_knob(out, 4), "tile_x": factor_knob(out, 4),
            "tile_f": factor_knob(d["F"], 4), "tile_ry": factor_knob(d["K"], 2), "tile_rx": factor_knob(d["K"], 2),
            "tile_rc": factor_knob(d["C"], 2),
            "auto_unroll_max_step": {"_type": "discrete", "_value": UNROLL_STEPS},
            "unroll_explicit": {"_type": "choice", "_value": [0, 1]},
            "pipeline": {"_type": "discrete", "_value": PIPELINE_DEPTHS}}


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    """A hand-picked config.  GPUs: a block takes up to 64 filters of 16 output pixels of one row, each of its
    threads 2 filters x 4 pixels.  CPUs: a row of one image at a time, 8 filters to a vector."""
    d, out = wl.dims, wl.out_hw
    if gpu:
        tiles = {"tile_n": [d["N"], 1, 1, 1], "tile_y": [out, 1, 1, 1], "tile_x": greedy_split(out, [1, 4, 4]),
                 "tile_f": greedy_split(d["F"], [1, 32, 2])}
    else:
        tiles = {"tile_n": [d["N"], 1, 1, 1], "tile_y": [out, 1, 1, 1], "tile_x": greedy_split(out, [1, 1, 1]),
                 "tile_f": greedy_split(d["F"], [1, 1, 8])}
    return {**tiles, "tile_ry": [d["K"], 1], "tile_rx": [d["K"], 1], "tile_rc": greedy_split(d["C"], [16]),
            "auto_unroll_max_step": 256 if gpu else 125, "unroll_explicit": 1, "pipeline": 2 if gpu else 0}


def rules(wl: Workload) -> list[Rule]:
    return unrolled_pipeline_rules(wl)


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    """What one thread block of the GPU schedule uses: threads, shared bytes, registers per thread."""
    n, y, x, f = p["tile_n"], p["tile_y"], p["tile_x"], p["tile_f"]
    ry, rx, rc = p["tile_ry"][1], p["tile_rx"][1], p["tile_rc"][1]
    s = wl.dims["ST"]
    window = math.prod(n[1:]) * ((math.prod(y[1:]) - 1) * s + ry) * ((math.prod(x[1:]) - 1) * s + rx) * rc
    weights = math.prod(f[1:]) * ry * rx * rc
    sums = n[1] * n[3] * y[1] * y[3] * x[1] * x[3] * f[1] * f[3]
    return {"threads": n[2] * y[2] * x[2] * f[2], "thread_dims": (f[2], x[2], n[2] * y[2]),
            "shared_bytes": (window + weights) * wl.element.itemsize * pipeline_buffers(p["pipeline"]),
            "registers_per_thread": sums + 16, "async_copy": p["pipeline"] >= 2}


def prim_func(wl: Workload) -> tvm.tirx.PrimFunc:
    """The convolution ("conv", float32 sums) and its output in the output type ("out")."""
    import tvm
    from tvm import te

    d, e = wl.dims, wl.element
    s, pad_width, size = d["ST"], d["PD"], d["HW"]
    data = te.placeholder(wl.input_shapes[0], e.tvm, name="data")
    weight = te.placeholder(wl.input_shapes[1], e.tvm, name="weight")
    padded = data
    if pad_width:
        def pad_value(n, y, x, c):
            inside = tvm.tirx.all(y >= pad_width, y < size + pad_width, x >= pad_width, x < size + pad_width)
            return tvm.tirx.if_then_else(inside, data[n, y - pad_width, x - pad_width, c], tvm.tirx.const(0, e.tvm))
        padded = te.compute((d["N"], size + 2 * pad_width, size + 2 * pad_width, d["C"]), pad_value, name="pad")
    ry = te.reduce_axis((0, d["K"]), name="ry")
    rx = te.reduce_axis((0, d["K"]), name="rx")
    rc = te.reduce_axis((0, d["C"]), name="rc")
    conv = te.compute(wl.output_shape,
                      lambda n, y, x, f: te.sum(padded[n, y * s + ry, x * s + rx, rc].astype(e.acc)
                                                * weight[f, ry, rx, rc].astype(e.acc), axis=[ry, rx, rc]),
                      name="conv")
    out = te.compute(wl.output_shape, lambda *i: conv[i].astype(wl.out_dtype), name="out")
    return te.create_prim_func([data, weight, out])


def schedule(wl: Workload, p: dict[str, Any], target: Target) -> tvm.IRModule:
    from tvm import s_tir

    gpu = target.is_gpu
    sch = s_tir.Schedule(prim_func(wl))
    if wl.dims["PD"] and not gpu:
        sch.compute_inline(sch.get_sblock("pad"))
    conv = sch.get_sblock("conv")
    n, y, x, f, ry, rx, rc = sch.get_loops(conv)
    n0, n1, n2, n3 = sch.split(n, p["tile_n"])
    y0, y1, y2, y3 = sch.split(y, p["tile_y"])
    x0, x1, x2, x3 = sch.split(x, p["tile_x"])
    f0, f1, f2, f3 = sch.split(f, p["tile_f"])
    ry0, ry1 = sch.split(ry, p["tile_ry"])
    rx0, rx1 = sch.split(rx, p["tile_rx"])
    rc0, rc1 = sch.split(rc, p["tile_rc"])
    sch.reorder(n0, y0, x0, f0, n1, y1, x1, f1, n2, y2, x2, f2, ry0, rx0, rc0, ry1, rx1, rc1, n3, y3, x3, f3)
    r0 = sch.fuse(ry0, rx0, rc0)
    sch.set_scope(conv, 0, "local")  # a thread's float32 sums, rounded once as they are stored
    out = sch.get_sblock("out")
    sch.reverse_compute_at(out, f2)
    if gpu:
        outer, threads = bind_tiles(sch, [(n0, n1, n2), (y0, y1, y2), (x0, x1, x2), (f0, f1, f2)],
                                    [p["tile_n"], p["tile_y"], p["tile_x"], p["tile_f"]])
        scope = shared_scope(target, resources(wl, p)["shared_bytes"])
        stage_inputs(sch, conv, r0, threads, scope, p["pipeline"], bool(wl.dims["PD"]))
    else:
        outer = sch.fuse(n0, y0, x0)
        sch.parallel(outer)
        if p["tile_f"][3] > 1:
            sch.vectorize(f3)
            sch.vectorize(sch.get_loops(out)[-1])
    unroll(sch, outer, p["auto_unroll_max_step"], bool(p["unroll_explicit"]))
    sch.decompose_reduction(conv, r0)
    return sch.mod

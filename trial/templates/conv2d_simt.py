"""Pointwise float32 convolutions on Hopper's CUDA cores, as the simt template's batched matmul (simt.py).

A 1x1 convolution of stride 1 without padding, NCHW, is per image a matmul on its tensors as they lie:
out[n] (F x H*W) = weights (F x C) . data[n] (C x H*W).  The simt kernel computes it with the weights as an A
that every image shares (one rank-2 tensor map, K-major) and the data as a batched B whose pixels are
contiguous (rank 3, an image a box deep), writing each image's output rows of filters (simt_operand.py's
`Gemm`).  The knobs, rules and resources are the simt template's on that matmul, `bmm/B<N>N<F>K<C>M<H*W>`: its
rows are filters (F), its columns pixels (H*W), its K channels (C).

Only such convolutions in float32 on sm_90, F and H*W multiples of 64 and C of 8 (`applies`); elsewhere
conv2d.py serves, and it keeps every other convolution.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constraints import Rule
from ..workload import Workload
from . import simt
from .conv2d import prim_func  # the same computation, for MetaSchedule
from .simt import compile_kernel, schedule  # the simt kernel reads a pointwise convolution's tensors itself
from .simt_operand import matmul_of

if TYPE_CHECKING:
    from ..target import Target

__all__ = ["applies", "search_space", "default_params", "prim_func", "schedule", "resources", "rules",
           "compile_kernel", "matmul_of"]


def pointwise(wl: Workload) -> bool:
    """Whether `wl` is a float32 NCHW convolution that is a matmul on its tensors: 1x1, stride 1, no padding."""
    d = wl.dims
    return (wl.op == "conv" and wl.layout == "NCHW" and wl.dtype == "float32" and d["K"] == 1 and d["ST"] == 1
            and d["PD"] == 0)


def applies(wl: Workload, target: Target | None) -> bool:
    return pointwise(wl) and simt.applies(matmul_of(wl), target)


def search_space(wl: Workload) -> dict[str, Any]:
    return simt.search_space(matmul_of(wl))


def default_params(wl: Workload, gpu: bool) -> dict[str, Any]:
    return simt.default_params(matmul_of(wl), gpu)


def resources(wl: Workload, p: dict[str, Any]) -> dict[str, Any]:
    return simt.resources(matmul_of(wl), p)


def rules(wl: Workload) -> list[Rule]:
    """The simt template's on the matmul, each message saying which of the convolution's sizes its N, M and K are."""
    d, matmul = wl.dims, matmul_of(wl)
    sizes = f" (the matmul's N is F {d['F']}, its M H*W {matmul.dims['M']}, its K C {d['C']})"

    def told(rule: Rule) -> Rule:
        return Rule(rule.use, rule.limit, lambda r, c: rule.message(r, c) + sizes, rule.grows)

    return [told(rule) for rule in simt.rules(matmul)]

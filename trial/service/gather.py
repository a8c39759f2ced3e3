"""A run's checked outputs gathered on the device, so that only they are read back.

The check reads a seeded sample of a kernel's output (trial/verify.py: 4,096 elements at most).  Read
back whole, the output crosses PCIe, and through RPC the connection, at every run: 2 MB for the study's
matmul, 287 MB for its 5x5 convolution.  Instead a small kernel, compiled once a workload for the
target (outside the device lock), picks those elements on the device, and only they come back.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import tvm
from tvm import s_tir, te

from ..build import compile_module
from ..target import Target
from ..workload import Workload

THREADS = 128  # a GPU block's threads
_FOLDER = tempfile.TemporaryDirectory(prefix="opevo-gather-")
_LIBRARIES: dict[tuple[str, int, str], str] = {}  # (workload, outputs, target) -> its library here


def gather_module(wl: Workload, count: int, gpu: bool) -> tvm.IRModule:
    """main(output, positions, sampled): sampled[i] = the output laid out flat, at positions[i] (int64)."""
    out = te.placeholder(wl.output_shape, wl.out_dtype, name="output")
    positions = te.placeholder((count,), "int64", name="positions")

    def at(i: Any) -> Any:
        rest, coords = positions[i], []
        for extent in reversed(wl.output_shape):
            coords.append(tvm.tirx.floormod(rest, extent))
            rest = tvm.tirx.floordiv(rest, extent)
        return out[tuple(reversed(coords))]

    sampled = te.compute((count,), at, name="sampled")
    sch = s_tir.Schedule(te.create_prim_func([out, positions, sampled]))
    if gpu:
        (i,) = sch.get_loops(sch.get_sblock("sampled"))
        block, thread = sch.split(i, [None, THREADS])
        sch.bind(block, "blockIdx.x")
        sch.bind(thread, "threadIdx.x")
    return sch.mod


def library(wl: Workload, count: int, target: Target) -> str:
    """The gather kernel of `wl`'s `count` checked outputs for `target`, compiled once in this process."""
    key = (wl.name, count, target.label)
    if key not in _LIBRARIES:
        path = str(Path(_FOLDER.name) / f"gather-{len(_LIBRARIES)}.so")
        compile_module(gather_module(wl, count, target.is_gpu), target.target).export_library(path)
        _LIBRARIES[key] = path
    return _LIBRARIES[key]

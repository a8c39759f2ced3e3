"""A workload's tensors kept on the device a runner measures on, between its runs.

A run needs the workload's inputs and an unwritten output (trial/run.py) on the device, and reads the
checked outputs back.  Made and copied for every run, that is host work under the device lock that
grows with the workload (the 5x5 study convolution's output is 287 MB) and, through RPC, bytes over
the connection.  So a runner keeps the last workload's inputs and unwritten output on its device, with
the kernel that gathers the checked outputs there (gather.py), and gives each run fresh copies made on
the device: a kernel that writes where it should not cannot spoil the next run's inputs, and one that
skips outputs cannot pass on a previous run's result.  Where the tensors and their copies would take
more than a quarter of the device's free memory, each run makes its own tensors instead.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

from .. import run
from ..dtypes import numpy_dtype
from ..verify import Reference

MEMORY_SHARE = 4  # keep where the kept tensors and their copies take at most 1 / MEMORY_SHARE of free memory


@dataclass
class Kept:
    key: Any  # the workload and seed
    made: list[Any]  # its inputs and unwritten output, made once on the device
    copies: list[Any]  # what each run gets: fresh copies of `made`
    sample: Callable[[Any], np.ndarray]  # a run's output -> its checked elements, gathered on the device


_KEPT: dict[str, Kept] = {}  # the device (or RPC runner) -> its last workload's tensors


def forget(where: str) -> None:
    """Let the tensors kept for `where` go (an RPC session that closes)."""
    _KEPT.pop(where, None)


def _fits(reference: Reference, dev: Any) -> bool:
    wl = reference.wl
    output = numpy_dtype(wl.out_dtype).itemsize * int(np.prod(wl.output_shape))
    size = 2 * (sum(a.nbytes for a in reference.inputs) + output)  # made once, and the runs' copies
    try:
        free = dev.available_global_memory
    except Exception:  # a device that does not say (the CPU)
        free = None
    return free is None or size * MEMORY_SHARE <= free


def prepared(where: str, key: Any, reference: Reference, dev: Any,
             gather: Callable[[], Any]) -> tuple[list[Any] | None, Any, Callable[[Any], np.ndarray] | None]:
    """For a run of the workload and seed `key` on `dev`: its inputs and unwritten output there, fresh, and
    what reads its checked outputs; made the first time `where` sees `key` (`gather`: loads the gather
    kernel's function there).  (None, None, None) where they do not fit: the run makes its own."""
    kept = _KEPT.get(where)
    if kept is None or kept.key != key:
        forget(where)  # the last workload's memory first
        if not _fits(reference, dev):
            return None, None, None
        made = [tvm.runtime.tensor(a, dev) for a in (*reference.inputs, run.unwritten_output(reference.wl))]
        function, positions = gather(), tvm.runtime.tensor(reference.flat_indices, dev)
        picked = tvm.runtime.empty(positions.shape, reference.wl.out_dtype, dev)

        def sample(output: Any) -> np.ndarray:
            function(output, positions, picked)
            return picked.numpy()

        kept = _KEPT[where] = Kept(key, made, [tvm.runtime.empty(a.shape, a.dtype, dev) for a in made], sample)
    for source, copy in zip(kept.made, kept.copies):
        source.copyto(copy)
    *inputs, out = kept.copies
    return inputs, out, kept.sample

"""Targets of GPUs that are not present, from their published limits, for writing experiments ahead.

`python -m experiments.write OP SPEC --arch sm_90` writes an experiment whose search space keeps an
H100's limits, on a machine that has no H100 (or no GPU).  The figures are those of the CUDA
programming guide's compute-capability tables and AMD's CDNA documentation: 48 KiB of static shared
memory per block on CUDA and the architecture's opt-in maximum for dynamic shared memory (227 KiB on
sm_90), 64 KiB on CDNA, 255 registers per thread.
"""
from __future__ import annotations

import dataclasses

from .target import OPTIN_SHARED_BYTES, DeviceLimits, Target

_CUDA = DeviceLimits(max_threads_per_block=1024, max_thread_dims=(1024, 1024, 64),
                     max_shared_memory_per_block=48 * 1024, max_registers_per_block=65536,
                     max_registers_per_thread=255, warp_size=32)
_CDNA = DeviceLimits(max_threads_per_block=1024, max_thread_dims=(1024, 1024, 1024),
                     max_shared_memory_per_block=64 * 1024, max_registers_per_block=131072,
                     max_registers_per_thread=512, warp_size=64)
CUDA_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
ROCM_ARCHS = ("gfx908", "gfx90a", "gfx942")
ARCHS = (*CUDA_ARCHS, *ROCM_ARCHS, "llvm")


class UnknownArch(ValueError):
    """An architecture this table does not describe."""


def target_of(arch: str) -> Target:
    """A Target for `arch` (one of ARCHS) built from its published limits, with no device behind it."""
    if arch in CUDA_ARCHS:
        limits = dataclasses.replace(_CUDA, max_shared_memory_per_block_optin=OPTIN_SHARED_BYTES[arch])
        return Target("cuda", {"kind": "cuda", "arch": arch}, f"any {arch} GPU", 1, limits)
    if arch in ROCM_ARCHS:
        return Target("rocm", {"kind": "rocm", "mcpu": arch}, f"any {arch} GPU", 1, _CDNA)
    if arch == "llvm":
        return Target("llvm", {"kind": "llvm"}, "any CPU", 1, None)
    raise UnknownArch(f"unknown --arch {arch!r}: expected one of {', '.join(ARCHS)}")

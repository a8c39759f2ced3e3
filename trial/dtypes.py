"""Element types of a matmul: what its inputs hold, what it accumulates and writes, and how closely a
result in that type can be checked.

float32 runs on the CUDA cores; the narrower types run on tensor cores (trial/templates/tensorcore.py),
one MMA instruction reducing `mma_k` products at a time.  TF32 is float32 in memory whose products a
tensor core takes with 10 of float32's 23 stored significand bits (as PyTorch's `allow_tf32` runs
float32 matmuls): its kernels are Hopper's wgmma ones (trial/templates/wgmma.py).  A spec names the type
with a suffix (`mm/N512K1024M1024_f16`); no suffix is float32, so every spec written before keeps its
meaning.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


def numpy_dtype(name: str) -> np.dtype:
    """numpy's dtype for TVM's type `name` (ml_dtypes provides the float8 types)."""
    return np.dtype(getattr(ml_dtypes, name, name))


@dataclass(frozen=True)
class DType:
    name: str        # TVM's name of the input type
    suffix: str      # how a spec names it ('' for float32)
    acc: str         # the accumulation type
    out: str         # what the kernel writes: the 16-bit float types as cuBLAS's GEMMs in them do, else the
                     # accumulation
    mma_k: int       # products one tensor-core MMA reduces (0: CUDA cores)
    min_arch: int    # oldest CUDA architecture with that MMA (sm_80 -> 80)
    step_bits: int   # significand bits an MMA keeps of each product while it adds them (0: all)
    storage: str = ""  # the type in memory, where it is not `name` (TF32: float32)
    input_bits: int = 0  # stored significand bits an MMA reads of each input, where fewer than the storage's

    @property
    def tvm(self) -> str:
        """TVM's (and numpy's, and PyTorch's) name of the type the inputs are stored in."""
        return self.storage or self.name

    @property
    def numpy(self) -> np.dtype:
        return numpy_dtype(self.tvm)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def acc_itemsize(self) -> int:
        return numpy_dtype(self.acc).itemsize

    @property
    def rounds_output(self) -> bool:
        """Whether the accumulated sums are rounded to a narrower output type as they are written."""
        return self.out != self.acc

    @property
    def out_roundoff(self) -> float:
        """The relative error of rounding an accumulated sum to the output type (0 where it is kept)."""
        return 2.0 ** -(ml_dtypes.finfo(numpy_dtype(self.out)).nmant + 1) if self.rounds_output else 0.0

    @property
    def is_integer(self) -> bool:
        return self.numpy.kind in "iu"


FLOAT32 = DType("float32", "", "float32", "float32", 0, 0, 0)
DTYPES = {d.name: d for d in (
    FLOAT32,
    DType("float16", "f16", "float32", "float16", 16, 80, 0),
    DType("bfloat16", "bf16", "float32", "bfloat16", 16, 80, 0),
    DType("int8", "i8", "int32", "int32", 32, 80, 0),
    # Hopper's float8 MMA aligns the products of one instruction to the largest and keeps about 13
    # significand bits of the sum (DeepSeek-V3 report, section 3.3.2), not float32's 24
    DType("float8_e4m3fn", "e4m3", "float32", "float32", 32, 89, 13),
    DType("tfloat32", "tf32", "float32", "float32", 8, 90, 0, storage="float32", input_bits=10),
)}
BY_SUFFIX = {d.suffix: d for d in DTYPES.values()}

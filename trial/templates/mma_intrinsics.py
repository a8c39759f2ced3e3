"""The tensor-core template's MMA intrinsics (ldmatrix loads, mma.sync, fill, store), including those TVM
0.27 does not register.

TVM registers ldmatrix from dynamic shared memory for float16 only, the store of accumulators to it for
float32 only, and nothing for bfloat16 (`get_mma_intrin_group` accepts float16, int8 and float8).  The
8-bit loads and the int32 store are TVM's own intrinsic makers called for those types.  bfloat16 uses
the instructions and fragment layouts of float16 (ldmatrix of 16-bit elements, mma.sync m16n8k16 with
float32 accumulators), so its intrinsics are TVM's float16 ones with the element type renamed.
"""
from __future__ import annotations

import ast
from typing import NamedTuple

from ..dtypes import DType


class Renaming(NamedTuple):
    """How one type's intrinsics are another's: that type, and (its, ours) in intrinsic names and in PTX."""

    base: str
    name: tuple[str, str]
    ptx: tuple[str, str]


RENAMED = {"bfloat16": Renaming("float16", ("f16", "bf16"), ("fp16", "bf16"))}


def intrinsics(e: DType, load_scope: str, store_scope: str, trans_a: bool, trans_b: bool) -> dict[str, str]:
    """The names of the init, load_a, load_b, compute and store intrinsics for inputs of type `e` read from
    `load_scope` and accumulators stored to `store_scope`, each registered with TVM."""
    from tvm.s_tir.tensor_intrin import cuda

    renaming = RENAMED.get(e.name)
    base = renaming.base if renaming else e.name
    # the store is TVM's "simple" one, element stores rather than an access pointer: the merged dynamic
    # shared buffer takes the inputs' type, against which TVM 0.27 rejects a float32 access pointer
    names = cuda.get_mma_intrin_group(load_scope, store_scope, base, e.acc, trans_a, trans_b,
                                      not_use_mma_store_intrinic=True)
    _register_missing(names, e.mma_k, base, load_scope, store_scope, e.acc)
    if renaming:
        for role in ("load_a", "load_b", "compute"):
            renamed = names[role].replace(*renaming.name)
            _register_renamed(names[role], renamed, e.name, renaming)
            names[role] = renamed
    return names


def _missing(name: str) -> bool:
    from tvm.s_tir import TensorIntrin

    return TensorIntrin.get(name, allow_missing=True) is None


def _register_missing(names: dict[str, str], mma_k: int, dtype: str, load_scope: str, store_scope: str,
                      acc: str) -> None:
    """The dynamic-shared ldmatrix of `dtype` and the store of `acc` accumulators, where TVM has none."""
    from tvm.s_tir import TensorIntrin
    from tvm.s_tir.tensor_intrin import cuda

    for role in ("load_a", "load_b"):
        if load_scope == "shared.dyn" and _missing(names[role]):
            matrix, trans = role[-1].upper(), "_trans" in names[role]
            TensorIntrin.register(names[role], *cuda.get_ldmatrix_intrin(mma_k, dtype, matrix, trans, load_scope))
    if _missing(names["store"]):
        TensorIntrin.register(names["store"], *cuda.get_mma_store_intrin(acc, 8, store_scope, False))


def _register_renamed(base_name: str, name: str, dtype: str, renaming: Renaming) -> None:
    """Register `name`: intrinsic `base_name` with its buffers of `renaming.base` of type `dtype` and its PTX
    operand types renamed."""
    from tvm.s_tir import TensorIntrin

    if _missing(name):
        found = TensorIntrin.get(base_name)
        TensorIntrin.register(name, retyped(found.desc, dtype, renaming), retyped(found.impl, dtype, renaming))


def retyped(func, dtype: str, renaming: Renaming):
    """`func` (a PrimFunc over `renaming.base` buffers) over `dtype` buffers, through TVMScript.  TVMScript
    prints an ldmatrix call without its type, which CUDA code generation reads (an 8-bit type gets
    element loads instead), so the type is written into each such call."""
    import tvm

    base_ptx, ptx = renaming.ptx
    text = func.script().replace(f'"{renaming.base}"', f'"{dtype}"').replace(f'"{base_ptx}"', f'"{ptx}"')
    tree = _TypedCalls("T.ptx_legacy.ldmatrix", dtype).visit(ast.parse(text))
    return tvm.script.from_source(ast.unparse(tree))


class _TypedCalls(ast.NodeTransformer):
    """Adds `dtype=` to every call of `function` (a dotted name) in a Python syntax tree."""

    def __init__(self, function: str, dtype: str) -> None:
        self.function, self.dtype = function, dtype

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if ast.unparse(node.func) == self.function:
            node.keywords.append(ast.keyword("dtype", ast.Constant(self.dtype)))
        return node

"""Matmul-shaped templates that fail on purpose, so tests can check that each failure gets its status.

Each keeps the real matmul knobs (so knob checks pass) and breaks one stage.
"""
from __future__ import annotations

import time

import tvm
from tvm import s_tir, te

from trial.templates import matmul


def _with_extern_call(wl, func: str, arg: int):
    """C[i, j] = A[i, j] + func(arg): a kernel that calls a C library function for every output."""
    n, m = wl.output_shape
    A, B = (te.placeholder(s, wl.dtype, name=name) for s, name in zip(wl.input_shapes, "AB"))
    call = tvm.tirx.call_extern("int32", func, tvm.tirx.const(arg, "uint32"))
    C = te.compute((n, m), lambda i, j: A[i, j] + tvm.tirx.Cast(wl.dtype, call), name="C")
    return tvm.IRModule({"main": te.create_prim_func([A, B, C])})


class _Matmul:
    search_space = staticmethod(matmul.search_space)
    default_params = staticmethod(matmul.default_params)
    resources = staticmethod(matmul.resources)


class Hang(_Matmul):
    """The kernel sleeps for an hour per output."""

    @staticmethod
    def schedule(wl, params, target):
        return _with_extern_call(wl, "sleep", 3600)


class Crash(_Matmul):
    """The kernel aborts the process."""

    @staticmethod
    def schedule(wl, params, target):
        return _with_extern_call(wl, "abort", 0)


class SlowBuild(_Matmul):
    """Scheduling never finishes in reasonable time."""

    @staticmethod
    def schedule(wl, params, target):
        time.sleep(3600)


class CompileError(_Matmul):
    """Binds a loop to a GPU thread axis, which the CPU code generator rejects."""

    @staticmethod
    def schedule(wl, params, target):
        sch = s_tir.Schedule(matmul.prim_func(wl))
        i, _, _ = sch.get_loops(sch.get_sblock("C"))
        sch.bind(i, "threadIdx.x")
        return sch.mod


class ScheduleError(_Matmul):
    """Vectorises the reduction loop, which TensorIR refuses."""

    @staticmethod
    def schedule(wl, params, target):
        sch = s_tir.Schedule(matmul.prim_func(wl))
        _, _, k = sch.get_loops(sch.get_sblock("C"))
        sch.vectorize(k)
        return sch.mod


class Wrong(_Matmul):
    """A correct schedule of the wrong computation: the last reduction step is dropped."""

    @staticmethod
    def schedule(wl, params, target):
        n, k_len, m = wl.dims["N"], wl.dims["K"], wl.dims["M"]
        A, B = (te.placeholder(s, wl.dtype, name=name) for s, name in zip(wl.input_shapes, "AB"))
        k = te.reduce_axis((0, k_len - 1), name="k")
        C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return tvm.IRModule({"main": te.create_prim_func([A, B, C])})


class IllegalAddress(_Matmul):
    """Reads a terabyte past the end of A: a GPU kernel fails with an illegal address, which leaves the
    process's CUDA context unusable; on the CPU the process dies of SIGSEGV."""

    @staticmethod
    def schedule(wl, params, target):
        n, m = wl.output_shape
        A, B = (te.placeholder(s, wl.dtype, name=name) for s, name in zip(wl.input_shapes, "AB"))
        far = tvm.tirx.const(1 << 38, "int64")
        C = te.compute((n, m), lambda i, j: A[i.astype("int64") + far, j.astype("int64")], name="C")
        sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
        if target.is_gpu:
            i, j = sch.get_loops(sch.get_sblock("C"))
            sch.bind(i, "blockIdx.x")
            sch.bind(j, "threadIdx.x")
        return sch.mod


class WritesHalf(_Matmul):
    """A correct matmul of the first half of C's rows that leaves the other half as it found it: right only
    where the output buffer already held the right answer (a previous run's)."""

    @staticmethod
    def schedule(wl, params, target):
        from tvm.script import tirx as T

        n, k, m, dtype = wl.dims["N"], wl.dims["K"], wl.dims["M"], wl.dtype

        @T.prim_func
        def half(A: T.Buffer((n, k), dtype), B: T.Buffer((k, m), dtype), C: T.Buffer((n, m), dtype)):
            for i, j in T.grid(n // 2, m):
                C[i, j] = T.cast(0, dtype)
                for r in range(k):
                    C[i, j] = C[i, j] + A[i, r] * B[r, j]

        return tvm.IRModule({"main": half})

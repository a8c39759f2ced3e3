"""How the simt kernel (simt_kernel.py) reads its operands: the TMA tensor maps of A and B and the copies'
coordinates, and where a swizzled K-major tile keeps each 16 bytes of its rows.

A K-major B's rows are `bk` floats long; the TMA writes them with the swizzle of that length (32, 64 or 128
bytes for bk 8, 16, 32) so that a quarter warp's 16-byte loads of eight adjacent rows fall in distinct banks.
A batched operand (bmm) is `batch` matrices one after another: its tensor map is of rank 3, the matrix
outermost, and each box one matrix deep, so that a box lands in shared memory as the rank-2 one does.

`Gemm` is the matmul the kernel computes over its arguments: an mm's or bmm's own, or a pointwise convolution's
(NCHW, 1x1, stride 1, no padding): per image, out (F x H*W) = weights (F x C) . data (C x H*W), the weights one
A shared by every image, the data a batched B whose pixels are contiguous.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..workload import Workload, parse_name

SWIZZLED = 1024  # a swizzled tile starts where its pattern does: every 8 128-byte lines (CUDA's TMA)


class Gemm(NamedTuple):
    """`batch` products C (n x m) = A (n x k) . B (k x m), A and B K-major or not; `a_shared`: one A for every
    product; `swapped`: the kernel's first argument holds B and its second A."""

    n: int
    k: int
    m: int
    batch: int
    a_kmajor: bool
    b_kmajor: bool
    a_shared: bool = False
    swapped: bool = False


def matmul_of(wl: Workload) -> Workload:
    """The batched matmul that pointwise convolution `wl` is: an image a product, F x C weights by C x H*W pixels."""
    d = wl.dims
    return parse_name(f"bmm/B{d['N']}N{d['F']}K{d['C']}M{d['HW'] ** 2}PNN")


def gemm_of(wl: Workload) -> Gemm:
    """The matmul of `wl`: an mm or bmm as its layout stores it, a pointwise convolution as its images' products
    (`matmul_of`) with one A, the weights, for every image."""
    if wl.op == "conv":
        return gemm_of(matmul_of(wl))._replace(a_shared=True, swapped=True)
    d = wl.dims
    return Gemm(d["N"], d["K"], d["M"], d.get("B", 1), wl.layout[0] == "N", wl.layout[1] == "T")


def swizzle(bk: int) -> int:
    """CUtensorMapSwizzle for K-major rows of `bk` floats: 32, 64 or 128 bytes (1, 2, 3), the row's length."""
    return {8: 1, 16: 2, 32: 3}[bk]


def b_at(c: Any, chunk: Any, bk: int) -> Any:
    """Where the swizzled K-major tile keeps the `chunk`-th 16 bytes of its row `c`: CUDA's swizzle XORs the
    chunk's index within its row with the row's 128-byte line, modulo the chunks of a row."""
    return c * bk + (chunk ^ (c * bk // 32 % (bk // 4))) * 4


def tensor_map(k_major: bool, tile: int, extent: int, k: int, bk: int, swizzled: bool = False,
               batch: int = 1) -> list[int]:
    """cuTensorMapEncodeTiled's arguments after the pointer, innermost dimension first, for float32 K tiles
    of `tile` rows (K-major: `tile` x `bk` boxes; otherwise `bk` x `tile`), swizzled where asked; with `batch`
    > 1, of that many `extent` x `k` matrices one after another (rank 3, boxes one matrix deep)."""
    dims, box = ((k, extent), (bk, tile)) if k_major else ((extent, k), (tile, bk))
    strides = (dims[0] * 4,)
    if batch > 1:
        dims, box, strides = (*dims, batch), (*box, 1), (*strides, extent * k * 4)
    return [*dims, *strides, *box, *[1] * len(dims), 0, swizzle(bk) if swizzled else 0, 2, 0]


def box(k_major: bool, tile: Any, k_tile: Any, matrix: Any = None) -> tuple[Any, ...]:
    """A TMA copy's coordinates, innermost first, of the box at row `tile` x K `k_tile` of an operand (of
    matrix `matrix` where it is batched)."""
    xy = (k_tile, tile) if k_major else (tile, k_tile)
    return xy if matrix is None else (*xy, matrix)

"""How the wgmma kernel (wgmma_kernel.py) holds an operand in shared memory and describes it.

Shared layout: each K tile of an operand is stored as the TMA writes it with the 128-byte swizzle: a K tile
is 128 bytes deep, 64 elements of a 16-bit type, 128 of an 8-bit one.  An operand whose K is contiguous (A
of N*, B of *T) is one box of `rows` x the K tile; otherwise (A of T*, B of *N; 16-bit types only, the
8-bit wgmma reads K-major operands alone) it is `rows`/64 boxes of 64 (K) x 64, 8 KiB apart.  Their
descriptors (16-byte units, PTX ISA "matrix descriptor"; the MN-major pair as CUTLASS's make_gmma_desc
gives it, verified on an H100): K-major LBO 1 (unused), SBO 64 (8 rows of 128 B), a step of +32 B per
wgmma (k16 of a 16-bit type, k32 of an 8-bit one); MN-major LBO 512 (between 64-wide boxes), SBO 64 (8 K
rows), k16 step +2 KiB.  The wgmma's transpose bit is 1 for MN-major operands.

A batched operand (bmm) is `batch` such matrices one after another: its tensor map is of rank 3, the matrix
outermost, and each box one matrix deep, so that a box lands in shared memory as the rank-2 one does.

The kernel's dynamic shared pool (`shared_bytes`) is laid out here too.
"""
from __future__ import annotations

from typing import Any

from .k_split import partial_sums


def k_tile(itemsize: int) -> int:
    """Elements of an input type of `itemsize` bytes in one K tile."""
    return K_TILE_BYTES // itemsize

K_TILE_BYTES = 128  # a 128-byte swizzle row: one K tile of a K-major operand
K_STEP_BYTES = 32  # the K of one wgmma: 16 products of a 16-bit type, 32 of an 8-bit one
BOX = 64  # a box of an MN-major (16-bit) operand: 64 x 64 elements, 8 KiB
SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B
DESCRIPTOR_SWIZZLE_128B = 1  # a matrix descriptor's layout type for it (PTX ISA, bits 62-63)
START_FIELD = (1 << 14) - 1  # a matrix descriptor's start address: bits 0-13, in 16-byte units
ALIGN = 1024  # a 128-byte swizzle pattern repeats every 8 rows: stages start 1024-aligned
C_PAD = 8  # elements after each row of the staged output: a pair of sums' width times 4 banks, 16-byte aligned
WGMMA_TYPES = {"float16": ("f32.f16.f16", 16), "bfloat16": ("f32.bf16.bf16", 16),
               "float8_e4m3fn": ("f32.e4m3.e4m3", 32), "int8": ("s32.s8.s8", 32),
               "tfloat32": ("f32.tf32.tf32", 8)}
"""The input types wgmma takes here: its PTX types (sums, A, B) and the products one wgmma reduces."""


def staged_elems(p: dict[str, Any]) -> int:
    """The staged output's elements: the columns this CTA stores, each row `C_PAD` longer (none with epilogue 0)."""
    return p["rows"] * (p["cols"] // p["split"] + C_PAD) if p["epilogue"] else 0


def shared_bytes(p: dict[str, Any], out_bytes: int) -> int:
    """The kernel's dynamic shared pool: mbarriers (padded to `ALIGN`), the stages (or, where it is larger,
    the partial tiles and the staged output after them), `ALIGN` of slack for aligning the stages at run
    time.  A stage's rows are 128 bytes deep in every input type."""
    stages = p["stages"] * (p["rows"] + p["cols"]) * K_TILE_BYTES
    partial = partial_sums(p["rows"], p["cols"], p["slices"], p["split"])
    return 2 * ALIGN + max(stages, (partial * 4 or 16) + staged_elems(p) * out_bytes)


class Operand:
    """How one input's K tiles are loaded and described: K-major (one box of `rows` x 64) or MN-major
    (`rows`/64 boxes of 64 x 64).  With `parts` CTAs sharing the tile, each loads 1/`parts` of every box
    (K-major: of its rows, MN-major: of its 64 K rows), which the TMA multicasts to all of them.  Elements
    are of `itemsize` bytes.  With `batch` > 1 the input holds that many `extent` x `k` matrices (either
    order in memory), contiguous one after another, and its tensor map is of rank 3 (`rank`)."""

    def __init__(self, k_major: bool, rows: int, extent: int, k: int, parts: int = 1, itemsize: int = 2,
                 batch: int = 1) -> None:
        if not k_major and itemsize != 2:
            raise ValueError("an MN-major wgmma operand is of a 16-bit type")
        self.k_major, self.rows, self.parts, self.k_tile = k_major, rows, parts, k_tile(itemsize)
        self.boxes = 1 if k_major else rows // BOX
        self.box_elems = rows * self.k_tile if k_major else BOX * self.k_tile
        self.part_elems = self.box_elems // parts  # a part is whole 128-byte rows: the swizzle is unchanged
        # tensor map: dims and box innermost first, the strides (of every dim but the innermost) in bytes
        dims, box = (((k, extent), (self.k_tile, rows // parts)) if k_major
                     else ((extent, k), (BOX, self.k_tile // parts)))
        strides: tuple[int, ...] = (dims[0] * itemsize,)  # a row's
        if batch > 1:  # the matrix outermost, a box one matrix deep
            dims, box, strides = (*dims, batch), (*box, 1), (*strides, extent * k * itemsize)
        self.batch, self.rank = batch, len(dims)
        self.tensor_map = [*dims, *strides, *box, *[1] * self.rank, 0, SWIZZLE_128B, 2, 0]
        self.lbo, self.sbo = (1, 64) if k_major else (512, 64)
        # elements between the K slices of one wgmma each within a tile
        self.k_step = K_STEP_BYTES // itemsize if k_major else 16 * BOX
        self.itemsize = itemsize
        self.transpose = 0 if k_major else 1

    def descriptor_high(self) -> int:
        """The bits of this operand's matrix descriptors that every one of them shares: the 128-byte swizzle
        (bits 62-63), SBO (bits 32-45) and LBO (bits 16-29), base offset 0.  The start address (bits 0-13,
        `start_units`) is what `descriptor_units` moves: 228 KiB of shared memory is 14,592 units, so a start
        plus a tile's K steps never carries into LBO."""
        return DESCRIPTOR_SWIZZLE_128B << 62 | self.sbo << 32 | self.lbo << 16

    def descriptor_units(self, elements: int) -> int:
        """`elements` of this operand past a descriptor's start, in the start address's 16-byte units."""
        return elements * self.itemsize // 16

    @staticmethod
    def start_units(shared_address: Any) -> Any:
        """A descriptor's start address field from a 32-bit shared address: its 16-byte units, cut to the field's
        14 bits as CUTLASS's descriptor does.  In a cluster, the shared address of a CTA other than the first
        carries its rank above the CTA's own 228 KiB (rank 1: 0x01000400 where rank 0 has 0x400), which would
        otherwise land in LBO."""
        return shared_address // 16 & START_FIELD

    def coords(self, tile: Any, first_row: Any, box: int, part: Any, matrix: Any = 0) -> tuple[Any, ...]:
        """TMA coordinates (innermost first) of part `part` of box `box` of K tile `tile`, rows from `first_row`,
        of matrix `matrix` where the operand is batched (rank 3)."""
        if self.k_major:
            xy = (tile * self.k_tile, first_row + part * (self.rows // self.parts))
        else:
            xy = (first_row + box * BOX, tile * self.k_tile + part * (self.k_tile // self.parts))
        return (*xy, matrix) if self.batch > 1 else xy

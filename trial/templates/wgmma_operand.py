"""How the wgmma kernel (wgmma_kernel.py) holds an operand in shared memory and describes it.

Shared layout: each K tile of an operand is stored as the TMA writes it with the 128-byte swizzle.  An
operand whose K is contiguous (A of N*, B of *T) is one box of `rows` x 64; otherwise (A of T*, B of
*N) it is `rows`/64 boxes of 64 (K) x 64, 8 KiB apart.  Their descriptors (16-byte units, PTX ISA
"matrix descriptor"; the MN-major pair as CUTLASS's make_gmma_desc gives it, verified on an H100):
K-major LBO 1 (unused), SBO 64 (8 rows of 128 B), k16 step +32 B; MN-major LBO 512 (between 64-wide
boxes), SBO 64 (8 K rows), k16 step +2 KiB.  The wgmma's transpose bit is 1 for MN-major operands.
"""
from __future__ import annotations

from typing import Any

K_TILE = 64  # float16 elements of a 128-byte swizzle row
BOX = 64  # a box of an MN-major operand: 64 x 64 elements, 8 KiB
SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B, and the descriptor's layout type for it


class Operand:
    """How one input's K tiles are loaded and described: K-major (one box of `rows` x 64) or MN-major
    (`rows`/64 boxes of 64 x 64).  With `parts` CTAs sharing the tile, each loads 1/`parts` of every box
    (K-major: of its rows, MN-major: of its 64 K rows), which the TMA multicasts to all of them."""

    def __init__(self, k_major: bool, rows: int, extent: int, k: int, parts: int = 1) -> None:
        self.k_major, self.rows, self.parts = k_major, rows, parts
        self.boxes = 1 if k_major else rows // BOX
        self.box_elems = rows * K_TILE if k_major else BOX * K_TILE
        self.part_elems = self.box_elems // parts  # a part is whole 128-byte rows: the swizzle is unchanged
        # tensor map: dims and box innermost first, the row stride in bytes
        dims, box = ((k, extent), (K_TILE, rows // parts)) if k_major else ((extent, k), (BOX, K_TILE // parts))
        self.tensor_map = [*dims, dims[0] * 2, *box, 1, 1, 0, SWIZZLE_128B, 2, 0]
        self.lbo, self.sbo = (1, 64) if k_major else (512, 64)
        self.k_step = 16 if k_major else 16 * BOX  # elements between the k16 slices of a tile
        self.transpose = 0 if k_major else 1

    def coords(self, tile: Any, first_row: Any, box: int, part: Any) -> tuple[Any, Any]:
        """TMA coordinates (innermost first) of part `part` of box `box` of K tile `tile`, rows from `first_row`."""
        if self.k_major:
            return tile * K_TILE, first_row + part * (self.rows // self.parts)
        return first_row + box * BOX, tile * K_TILE + part * (K_TILE // self.parts)

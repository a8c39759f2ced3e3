"""The row tiles of the wgmma kernel (wgmma_kernel.py): which rows of A a grid row multiplies, how A's K tiles
are read (TMA coordinates), and where the tile's rows go in C.

`MatrixRows`: rows of a matrix, for mm, and of each of bmm's products.  `PixelRows`: an NHWC convolution's
implicit GEMM, each row tile a rectangle of output pixels of one image, `width` wide; its K tiles are
(kernel row, kernel column, 128 bytes of channels) in the weights' order, each a box of the input that TMA
reads at the window's offset, `ST` apart along rows and columns (the box's element strides), zeros where it
reaches into the padding or past the image.  A tile's rows are its pixels row-major; those past the output's
edge are computed from zeros and not stored, as are a matrix's rows past N in its last row tile.
"""
from __future__ import annotations

from typing import Any

from ..workload import Workload
from .wgmma_operand import SWIZZLE_128B, Operand, k_tile


def row_tiles(n: int, rows: int) -> int:
    """Row tiles of `rows` that cover `n` rows, the last one partial where rows do not divide n."""
    return -(-n // rows)


class MatrixRows:
    """Grid row `by` is row tile by % per_matrix of product by // per_matrix (0 for mm), per_matrix = ceil(N /
    rows): where rows do not divide N, the last tile of each matrix reaches past it, TMA fills A's rows there
    with zeros (a rank-3 map's box stops at its own product's rows) and the epilogue stores none of them."""

    def __init__(self, wl: Workload, rows: int) -> None:
        d = wl.dims
        self.rows, self.batch, self.n, self.per_matrix = rows, d.get("B", 1), d["N"], row_tiles(d["N"], rows)
        self.count = self.per_matrix * self.batch
        self.a = Operand(wl.layout[0] == "N", rows, d["N"], d["K"], itemsize=wl.element.itemsize, batch=self.batch)
        self.a_map, self.a_rank = self.a.tensor_map, self.a.rank

    def first_row(self, by: Any) -> Any:
        return by % self.per_matrix * self.rows if self.batch > 1 else by * self.rows

    def matrix(self, by: Any) -> Any:
        return by // self.per_matrix if self.batch > 1 else 0

    def a_coords(self, tile: Any, by: Any, box: int) -> tuple[Any, ...]:
        return self.a.coords(tile, self.first_row(by), box, 0, self.matrix(by))

    def c_at(self, by: Any, row: Any, col: Any) -> tuple[Any, ...]:
        """C's indices of row `row` of grid row `by`'s tile, column `col`."""
        first = self.first_row(by) + row
        return (self.matrix(by), first, col) if self.batch > 1 else (first, col)

    def inside(self, by: Any, row: Any) -> Any:
        """Whether row `row` of grid row `by`'s tile is a row of C (statically True where rows divide N)."""
        return True if self.n % self.rows == 0 else self.first_row(by) + row < self.n


class PixelRows:
    """Grid row `by` is pixel tile by % per_image of image by // per_image, rectangles `width` wide and
    rows / `width` high in row-major order."""

    def __init__(self, wl: Workload, rows: int, width: int) -> None:
        d, size = wl.dims, wl.element.itemsize
        self.rows, self.width, self.height = rows, width, rows // width
        self.stride, self.pad, self.kernel, self.out = d["ST"], d["PD"], d["K"], wl.out_hw
        self.across, self.down = -(-self.out // width), -(-self.out // self.height)
        self.count = d["N"] * self.across * self.down
        self.depth = k_tile(size)
        self.channel_tiles = d["C"] // self.depth
        # the descriptors' view: K-major rows of K x K x C products, one box a tile
        self.a = Operand(True, rows, self.count * rows, d["K"] ** 2 * d["C"], itemsize=size)
        c, hw, s = d["C"], d["HW"], self.stride
        self.a_rank = 4  # C, W, H, N, innermost first
        self.a_map = [c, hw, hw, d["N"], c * size, hw * c * size, hw * hw * c * size,
                      self.depth, width * s, self.height * s, 1, 1, s, s, 1, 0, SWIZZLE_128B, 2, 0]

    def origin(self, by: Any) -> tuple[Any, Any, Any]:
        """Image, first output row and first output column of grid row `by`'s tile."""
        per_image = self.across * self.down
        return by // per_image, by % per_image // self.across * self.height, by % self.across * self.width

    def matrix(self, by: Any) -> Any:
        return 0  # the weights: one matrix

    def a_coords(self, tile: Any, by: Any, box: int) -> tuple[Any, ...]:
        channels = tile % self.channel_tiles
        kx, ky = tile // self.channel_tiles % self.kernel, tile // (self.channel_tiles * self.kernel)
        image, y, x = self.origin(by)
        return (channels * self.depth, x * self.stride + kx - self.pad, y * self.stride + ky - self.pad, image)

    def c_at(self, by: Any, row: Any, col: Any) -> tuple[Any, ...]:
        image, y, x = self.origin(by)
        return (image, y + row // self.width, x + row % self.width, col)

    def inside(self, by: Any, row: Any) -> Any:
        """Whether row `row` of the tile is an output pixel (statically True where the tiles cover the output)."""
        if self.out % self.width == 0 and self.out % self.height == 0:
            return True
        from tvm import tirx

        _, y, x = self.origin(by)
        return tirx.all(y + row // self.width < self.out, x + row % self.width < self.out)

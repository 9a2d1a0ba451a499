"""Cutting a scene into overlapping tiles, and which pixels of a tile are nodata."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput

__all__ = ["GDAL_CACHE_BYTES", "Tile", "tile_grid"]

# GDAL's block cache while a scene is read: by default 5% of the machine's memory, which a
# decimated read of a big GeoTIFF without overviews fills with the whole decompressed scene.
GDAL_CACHE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Tile:
    """One window of the scene: rows ``row:row + height``, columns ``col:col + width``."""

    index: int
    row: int
    col: int
    height: int
    width: int

    @property
    def bounds(self) -> tuple[int, int, int, int]:
        """(r0, c0, r1, c1), ends exclusive."""
        return self.row, self.col, self.row + self.height, self.col + self.width

    @property
    def slices(self) -> tuple[slice, slice]:
        return np.s_[self.row : self.row + self.height, self.col : self.col + self.width]


def _starts(length: int, size: int, overlap: int) -> list[int]:
    if length <= size:
        return [0]
    stride = size - overlap
    n = math.ceil((length - size) / stride) + 1
    # Evenly spread, the last tile flush with the far edge: every tile is whole, and neighbours
    # overlap by at least `overlap`.
    return [int(v) for v in np.round(np.linspace(0, length - size, n))]


def tile_grid(rows: int, cols: int, tile_size: int, overlap: int) -> list[Tile]:
    """Overlapping ``tile_size`` squares covering a ``rows x cols`` scene, row by row.

    Neighbouring tiles overlap by at least ``overlap`` pixels; the last tile of a row or column
    sits flush with the scene's edge, so every tile is whole. A scene side shorter than a tile
    gives one tile of that side's length.
    """
    for name, value in (("rows", rows), ("cols", cols), ("tile_size", tile_size)):
        validate.positive_int(name, value)
    if isinstance(overlap, bool) or not isinstance(overlap, int | np.integer):
        raise InvalidInput(f"overlap must be a whole number of pixels, got {overlap!r}")
    if not 0 <= overlap <= tile_size // 2:
        raise InvalidInput(
            f"overlap must be between 0 and half the tile ({tile_size // 2} px), got {overlap}"
        )
    tiles = []
    for r in _starts(int(rows), int(tile_size), int(overlap)):
        for c in _starts(int(cols), int(tile_size), int(overlap)):
            h, w = min(tile_size, rows - r), min(tile_size, cols - c)
            tiles.append(Tile(len(tiles), r, c, int(h), int(w)))
    return tiles

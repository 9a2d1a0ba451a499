"""A detection's mask in a whole scene: the RLE of its bounding-box crop plus the crop's offset."""

from __future__ import annotations

import numpy as np

from napari_sam3.core.errors import InvalidInput
from napari_sam3.masks.protocol import Crop, LazyMask, tight_crop
from napari_sam3.masks.rle import RleMask

__all__ = ["SceneMask"]


class SceneMask(LazyMask):
    """One detection's mask in a scene, kept as the RLE of its bounding-box crop plus its offset.

    ``shape`` is the scene's (rows, cols); ``bbox`` is ``(x1, y1, x2, y2)`` in scene pixels
    (pixel edges, ends exclusive). :meth:`crop` gives the dense crop, :meth:`window` any part of
    the scene, and ``np.asarray(mask)`` / :meth:`to_dense` the full scene (large: rows x cols
    bytes).
    """

    __slots__ = ("col", "rle", "row", "scene_shape")

    def __init__(self, rle: RleMask, row: int, col: int, scene_shape: tuple[int, int]) -> None:
        h, w = rle.shape
        rows, cols = (int(v) for v in scene_shape)
        if row < 0 or col < 0 or row + h > rows or col + w > cols:
            raise InvalidInput(
                f"a crop of {h}x{w} at row {row}, column {col} does not fit a scene of "
                f"{rows}x{cols} pixels"
            )
        self.rle = rle
        self.row = int(row)
        self.col = int(col)
        self.scene_shape = (rows, cols)

    @classmethod
    def from_crop(
        cls, pixels: np.ndarray, row: int, col: int, scene_shape: tuple[int, int]
    ) -> SceneMask:
        """The mask whose pixels inside the window at (row, col) are ``pixels`` (bool 2-D)."""
        r0, c0, tight = tight_crop(row, col, np.asarray(pixels, dtype=bool))
        return cls(RleMask.from_dense(np.ascontiguousarray(tight)), r0, c0, scene_shape)

    @property
    def shape(self) -> tuple[int, int]:
        return self.scene_shape

    @property
    def area(self) -> int:
        return self.rle.area

    @property
    def nbytes(self) -> int:
        """The memory its mask takes (runs, or the intervals they are made from)."""
        return int(self.rle.nbytes)

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        h, w = self.rle.shape
        if self.rle.area == 0:
            return (0, 0, 0, 0)
        return (self.col, self.row, self.col + w, self.row + h)

    def crop(self) -> Crop:
        """(first row, first column, dense bool crop): the mask's pixels within its bbox."""
        return self.row, self.col, self.rle.to_dense()

    def window(self, r0: int, c0: int, r1: int, c1: int) -> np.ndarray:
        """The mask's pixels in scene rows ``r0:r1`` and columns ``c0:c1`` (bool), decoded from
        the runs that reach those rows only."""
        return self.rle.window(r0 - self.row, c0 - self.col, r1 - self.row, c1 - self.col)

    def to_rle(self) -> RleMask:
        return RleMask.from_crop(self.rle.to_dense(), self.row, self.col, self.scene_shape)

    def __repr__(self) -> str:
        return f"SceneMask(scene={self.scene_shape}, bbox={self.bbox}, area={self.area})"

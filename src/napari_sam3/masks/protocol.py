"""The one interface every lazy mask offers, whatever it keeps (runs, a crop, pixel indices).

A mask is a bool ``(rows, cols)`` image in some frame (``shape``) that is made dense only on
demand. Painting (:mod:`~napari_sam3.masks.paint`), polygonising and writing
(:mod:`napari_sam3.gis.vector`) and scene merging use only these members:

- ``shape``: ``(rows, cols)`` of the frame;
- ``bbox``: ``(x1, y1, x2, y2)`` in pixel edges (ends exclusive), zeros if the mask is empty;
- ``area``: foreground pixel count;
- ``crop()``: ``(first row, first column, bool pixels)`` of the tight bounding box (``(0, 0)`` and a
  0 x 0 array if empty);
- ``window(r0, c0, r1, c1)``: the pixels of any rectangle of the frame (zero outside the mask);
- ``to_dense()`` / ``np.asarray(mask)``: the whole frame; ``to_rle()``: an
  :class:`~napari_sam3.masks.rle.RleMask` of the whole frame.

:class:`~napari_sam3.masks.rle.RleMask` implements it directly (rle.py must stay standalone);
the others derive from :class:`LazyMask`, which builds everything but ``shape`` and ``crop()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from napari_sam3.core.errors import InvalidInput
from napari_sam3.masks.rle import RleMask

__all__ = ["ArrayMask", "Crop", "LazyMask", "Mask", "as_mask", "frame_masks", "tight_crop"]

Crop = tuple[int, int, np.ndarray]  # (first row, first column, bool pixels)


@runtime_checkable
class Mask(Protocol):
    @property
    def shape(self) -> tuple[int, int]: ...

    @property
    def bbox(self) -> tuple[int, int, int, int]: ...

    @property
    def area(self) -> int: ...

    def crop(self) -> Crop: ...

    def window(self, r0: int, c0: int, r1: int, c1: int) -> np.ndarray: ...

    def to_dense(self) -> np.ndarray: ...

    def to_rle(self) -> RleMask: ...

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray: ...


def tight_crop(r0: int, c0: int, pixels: np.ndarray) -> Crop:
    """Shrink a crop at (r0, c0) to the bounding box of its foreground."""
    rows = np.flatnonzero(pixels.any(axis=1))
    if rows.size == 0:
        return 0, 0, np.zeros((0, 0), dtype=bool)
    cols = np.flatnonzero(pixels.any(axis=0))
    crop = pixels[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    return r0 + int(rows[0]), c0 + int(cols[0]), crop


class LazyMask:
    """The :class:`Mask` members built from ``shape`` and ``crop()``; subclasses may override
    any of them with a cheaper way."""

    __slots__ = ()

    @property
    def shape(self) -> tuple[int, int]:
        raise NotImplementedError

    def crop(self) -> Crop:
        raise NotImplementedError

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        r0, c0, pixels = self.crop()
        if pixels.size == 0:
            return (0, 0, 0, 0)
        return (c0, r0, c0 + pixels.shape[1], r0 + pixels.shape[0])

    @property
    def area(self) -> int:
        return int(np.count_nonzero(self.crop()[2]))

    def window(self, r0: int, c0: int, r1: int, c1: int) -> np.ndarray:
        out = np.zeros((max(r1 - r0, 0), max(c1 - c0, 0)), dtype=bool)
        row, col, pixels = self.crop()
        h, w = pixels.shape
        top, bottom = max(r0, row), min(r1, row + h)
        left, right = max(c0, col), min(c1, col + w)
        if top < bottom and left < right:
            out[top - r0 : bottom - r0, left - c0 : right - c0] = pixels[
                top - row : bottom - row, left - col : right - col
            ]
        return out

    def to_dense(self) -> np.ndarray:
        rows, cols = self.shape
        return self.window(0, 0, rows, cols)

    def to_rle(self) -> RleMask:
        row, col, pixels = self.crop()
        return RleMask.from_crop(pixels, row, col, self.shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        dense = self.to_dense()
        return dense if dtype is None else dense.astype(dtype)


class ArrayMask(LazyMask):
    """A plain bool (or 0/1 integer) 2-D array seen through the :class:`Mask` interface."""

    __slots__ = ("pixels",)

    def __init__(self, pixels: np.ndarray) -> None:
        self.pixels = pixels

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.pixels.shape)

    def crop(self) -> Crop:
        return tight_crop(0, 0, self.pixels)

    def to_dense(self) -> np.ndarray:
        return self.pixels


def as_mask(value: Any, row: int | None = None) -> Mask:
    """A lazy mask as it is; a 2-D bool (or 0/1 integer) array as an :class:`ArrayMask`."""
    # Not isinstance(value, Mask): on Python 3.11 that evaluates every property (a crop each).
    if isinstance(value, LazyMask | RleMask):
        return value
    arr = np.asarray(value)
    where = "" if row is None else f"row {row}: "
    if arr.ndim != 2:
        raise InvalidInput(
            f"{where}a mask must be a 2-D (rows, cols) array, got shape {arr.shape}."
        )
    if arr.dtype.kind in "ui":
        arr = arr != 0
    elif arr.dtype != np.bool_:
        raise InvalidInput(
            f"{where}a mask must be bool (or 0/1 integers), got {arr.dtype}; threshold "
            "probabilities or logits first, e.g. mask > 0."
        )
    return ArrayMask(arr)


def _shape_of(value: Any) -> tuple[int, ...]:
    # Lazy masks know their shape; np.shape would make them dense.
    shape = getattr(value, "shape", None)
    return tuple(shape) if isinstance(shape, tuple) else np.shape(value)


def frame_masks(
    values: Iterable[Any], shape: Sequence[int] | None, where: str
) -> tuple[list[Mask], tuple[int, int]]:
    """Every value of a ``mask`` column as a :class:`Mask` of one frame, and that frame's shape.

    ``shape`` defaults to the first mask's; it is required when there is no mask.
    """
    values = list(values)
    if shape is None:
        if not values:
            raise InvalidInput(
                f"{where}: the DataFrame is empty, so the image shape is unknown; "
                "pass shape=(rows, cols) (or raster=)."
            )
        shape = _shape_of(values[0])
    shape = tuple(shape)
    if len(shape) != 2 or not all(isinstance(v, int | np.integer) and v > 0 for v in shape):
        raise InvalidInput(
            f"{where}: shape must be (rows, cols) of positive integers, got {shape!r}."
        )
    shape = (int(shape[0]), int(shape[1]))
    masks = []
    for i, value in enumerate(values):
        got = _shape_of(value)
        if tuple(got) != shape:
            raise InvalidInput(
                f"row {i}: mask of shape {tuple(got)} does not match the image's {shape} "
                "(rows, cols); masks must be in the original image's pixels (a windowed or "
                "decimated read needs the Raster of exactly that read)."
            )
        masks.append(as_mask(value, i))
    return masks, shape

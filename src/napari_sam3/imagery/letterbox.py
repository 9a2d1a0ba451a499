"""Letterbox an image into the model's square input and map boxes, points and masks both ways.

The image is scaled so its longest side is exactly ``size`` (S), anchored at the top-left corner,
and padded with zeros on the right/bottom (docs/architecture.md).

Coordinates are continuous pixel coordinates: pixel ``(row, col)`` covers ``[col, col + 1) x
[row, row + 1)`` and its centre is ``(col + 0.5, row + 0.5)``; a box ``[x1, y1, x2, y2]`` covering
columns ``c0..c1`` and rows ``r0..r1`` is ``[c0, r0, c1 + 1, r1 + 1]``. Boxes and points map with the
per-axis scale actually applied by the resize (``scale_xy``; rounding the short side makes it differ
from ``scale`` by less than half a pixel over the image).

Boxes and points given in image pixels must touch the image: one lying wholly outside raises
ValueError; one partly outside is clipped to the image. Results mapped back to image pixels are
clipped to the image (a model box lying wholly in the padding collapses onto the image's edge).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput


@dataclass(frozen=True)
class Letterbox:
    """The letterbox of an image of ``image_shape`` (rows, cols) into a ``size`` x ``size`` input."""

    image_shape: tuple[int, int]
    size: int
    resized_shape: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        shape = tuple(self.image_shape)
        try:
            rows, cols = (validate.positive_int("image_shape", v) for v in shape)
        except ValueError:
            raise InvalidInput(
                f"image_shape must be (rows, cols) with positive integers, got {self.image_shape!r}; "
                "for an RGB array pass image.shape[:2]."
            ) from None
        size = validate.positive_int("size", self.size)
        if rows >= cols:
            resized = (size, max(1, round(cols * size / rows)))
        else:
            resized = (max(1, round(rows * size / cols)), size)
        object.__setattr__(self, "image_shape", (rows, cols))
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "resized_shape", resized)

    @property
    def scale(self) -> float:
        """Nominal scale: model pixels per image pixel along the longest side."""
        return self.size / max(self.image_shape)

    @property
    def scale_xy(self) -> tuple[float, float]:
        """(x, y) scales applied by the resize: resized width / width, resized height / height."""
        return (
            self.resized_shape[1] / self.image_shape[1],
            self.resized_shape[0] / self.image_shape[0],
        )

    # ------------------------------------------------------------------------ image

    def apply(self, rgb: np.ndarray) -> np.ndarray:
        """uint8 RGB (rows, cols, 3) -> the model input, uint8 ``[1, 3, S, S]``."""
        rgb = np.asarray(rgb)
        if rgb.dtype != np.uint8 or rgb.shape != (*self.image_shape, 3):
            raise InvalidInput(
                f"Letterbox.apply expects uint8 RGB of shape {(*self.image_shape, 3)}, got "
                f"{rgb.dtype} {rgb.shape}; convert with to_model_rgb first."
            )
        height, width = self.resized_shape
        if (height, width) == self.image_shape:
            resized = rgb
        else:
            # PIL widens the bilinear kernel when shrinking, so downscaling averages (no aliasing).
            image = Image.fromarray(np.ascontiguousarray(rgb))
            resized = np.asarray(image.resize((width, height), Image.Resampling.BILINEAR))
        out = np.zeros((1, 3, self.size, self.size), dtype=np.uint8)
        out[0, :, :height, :width] = np.moveaxis(resized, -1, 0)
        return out

    # ------------------------------------------------------------------------ boxes and points

    def boxes_to_model(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in image pixels, (4,) or (N, 4) -> model-input pixels (float64, same shape).

        A box wholly outside the image raises ValueError; a box partly outside is clipped first.
        """
        arr, single = self._boxes(boxes, "boxes_to_model")
        rows, cols = self.image_shape
        clipped = validate.boxes_on_image(arr, (cols, rows))
        out = clipped * np.tile(self.scale_xy, 2)
        return out[0] if single else out

    def boxes_to_image(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in model-input pixels, (4,) or (N, 4) -> image pixels, clipped to the image."""
        arr, single = self._boxes(boxes, "boxes_to_image")
        out = self._clip(arr / np.tile(self.scale_xy, 2), 4)
        return out[0] if single else out

    def points_to_model(self, points: np.ndarray) -> np.ndarray:
        """xy points in image pixels, (2,) or (N, 2) -> model-input pixels. Outside: ValueError."""
        arr, single = self._points(points, "points_to_model")
        rows, cols = self.image_shape
        outside = (arr[:, 0] < 0) | (arr[:, 0] > cols) | (arr[:, 1] < 0) | (arr[:, 1] > rows)
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise InvalidInput(
                f"point {i} {arr[i].tolist()} (xy, image pixels) lies outside the image of "
                f"{cols} x {rows} pixels (width x height)."
            )
        out = arr * np.asarray(self.scale_xy)
        return out[0] if single else out

    def points_to_image(self, points: np.ndarray) -> np.ndarray:
        """xy points in model-input pixels, (2,) or (N, 2) -> image pixels, clipped to the image."""
        arr, single = self._points(points, "points_to_image")
        out = self._clip(arr / np.asarray(self.scale_xy), 2)
        return out[0] if single else out

    # ------------------------------------------------------------------------ masks

    def mask_to_image(self, mask: np.ndarray) -> np.ndarray:
        """Model-space mask(s) (..., S, S) -> bool (..., rows, cols).

        Each image pixel takes the model pixel under its centre (exact integer arithmetic).
        """
        arr = self._mask(mask, (self.size, self.size), "mask_to_image")
        (rows, cols), (height, width) = self.image_shape, self.resized_shape
        r = _centre_index(rows, height)
        c = _centre_index(cols, width)
        return _take_2d(arr, r, c)

    def crop_to_image(self, row: int, col: int, crop: np.ndarray) -> tuple[int, int, np.ndarray]:
        """The part of :meth:`mask_to_image` taken from a model-space crop at (row, col):
        ``(first image row, first image column, bool pixels)``; 0 x 0 if no image pixel's centre
        falls inside the crop (e.g. a crop in the padding)."""
        arr = np.asarray(crop, dtype=bool)
        (rows, cols), (height, width) = self.image_shape, self.resized_shape
        r = _centre_index(rows, height)
        c = _centre_index(cols, width)
        # The indices are non-decreasing, so the crop maps to one contiguous image range.
        r0, r1 = (int(v) for v in np.searchsorted(r, [row, row + arr.shape[0]]))
        c0, c1 = (int(v) for v in np.searchsorted(c, [col, col + arr.shape[1]]))
        if r0 >= r1 or c0 >= c1:
            return 0, 0, np.zeros((0, 0), dtype=bool)
        return r0, c0, _take_2d(arr, r[r0:r1] - row, c[c0:c1] - col)

    def mask_to_model(self, mask: np.ndarray) -> np.ndarray:
        """Image-space mask(s) (..., rows, cols), e.g. a painted seed -> bool (..., S, S).

        Each model pixel inside the resized image takes the image pixel under its centre; the
        padding is False.
        """
        arr = self._mask(mask, self.image_shape, "mask_to_model")
        (rows, cols), (height, width) = self.image_shape, self.resized_shape
        r = _centre_index(height, rows)
        c = _centre_index(width, cols)
        out = np.zeros((*arr.shape[:-2], self.size, self.size), dtype=bool)
        out[..., :height, :width] = _take_2d(arr, r, c)
        return out

    # ------------------------------------------------------------------------ validation

    def _boxes(self, boxes: np.ndarray, where: str) -> tuple[np.ndarray, bool]:
        return validate.boxes(boxes, where=where), np.ndim(boxes) == 1

    def _points(self, points: np.ndarray, where: str) -> tuple[np.ndarray, bool]:
        return validate.points(points, where=where), np.ndim(points) == 1

    def _clip(self, arr: np.ndarray, width: int) -> np.ndarray:
        rows, cols = self.image_shape
        upper = np.tile([cols, rows], width // 2)
        return np.clip(arr, 0.0, upper)

    @staticmethod
    def _mask(mask: np.ndarray, shape: tuple[int, int], where: str) -> np.ndarray:
        arr = np.asarray(mask)
        if arr.ndim < 2 or arr.shape[-2:] != shape:
            raise InvalidInput(
                f"{where}: expected a mask of shape (..., {shape[0]}, {shape[1]}), got {arr.shape}."
            )
        if arr.dtype == np.bool_:
            return arr
        if arr.dtype.kind in "ui":
            return arr != 0
        raise InvalidInput(
            f"{where}: expected a bool (or 0/1 integer) mask, got {arr.dtype}; threshold "
            "probabilities or logits first, e.g. mask > 0."
        )


def _take_2d(arr: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``arr[..., rows[:, None], cols[None, :]]``, one axis at a time: 4x faster (1008 px
    mask to a 768 x 1536 image: 4.4-4.8 -> 1.1 ms), the same pixels."""
    return arr.take(rows, axis=-2).take(cols, axis=-1)


def _centre_index(n_out: int, n_in: int) -> np.ndarray:
    """For each of ``n_out`` cells spanning the same extent as ``n_in`` cells, the input cell under
    the output cell's centre: floor((i + 0.5) * n_in / n_out), in integers so no float rounding."""
    i = np.arange(n_out, dtype=np.int64)
    return np.minimum(((2 * i + 1) * n_in) // (2 * n_out), n_in - 1)

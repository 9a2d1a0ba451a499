"""Which pixels are part of the scene: the one validity rule for the model's input.

A pixel is invalid when

- GDAL's dataset mask says so: an alpha band, an internal or side-car (.msk) mask band, or the
  outside of a footprint warped from GCPs (read by :func:`~napari_sam3.imagery.raster.read_raster`
  into ``Raster.valid``);
- **every** chosen band equals the nodata value (the file's, the one passed as ``nodata=``, or
  unflagged fill found by :func:`infer_fill`). As GDAL's dataset mask for nodata, one band at
  that value is not enough: a dark-water pixel with blue = 0 stays valid;
- any chosen band is NaN.

``nodata="none"`` (:data:`NO_NODATA`) uses no nodata value at all: not the file's and no inferred
fill (masks and alpha still apply).

Invalid pixels never enter a stretch, reach the model as 0, are cut out of every detection, and a
tile with no valid pixel is not sent to the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from napari_sam3.core.errors import InvalidInput

NO_NODATA = "none"
# Unflagged fill: a value found on at least this share of the raster's outermost pixels, in every
# band, and on at least MIN_FILL_SHARE of all its pixels, that is a sentinel as fill values are
# (0, the type's lowest or highest value, or -999 and below), so that a bright or dark area of
# constant colour on an edge is not mistaken for fill. A collar around a tilted footprint
# (Landsat L1) covers most of the border; a few dark pixels on an edge do not.
MIN_BORDER_SHARE = 0.25
MIN_FILL_SHARE = 0.01

NodataLike = float | int | str | None


@dataclass(frozen=True)
class Fill:
    """Unflagged fill: ``value`` in every band on ``share`` of the pixels looked at."""

    value: float
    share: float

    def message(self, where: str = "the scene") -> str:
        return (
            f"{self.share:.0%} of {where} is {_number(self.value)} in every band and not flagged "
            f"as nodata: treated as fill (nodata={_number(self.value)}); pass nodata='none' "
            "(--nodata none) to keep it as image"
        )


def check_nodata(nodata: NodataLike) -> float | str | None:
    """``nodata`` as given by a caller: a number, ``"none"`` or None (the file's, or fill)."""
    if nodata is None:
        return None
    if isinstance(nodata, str):
        text = nodata.strip().lower()
        if text == NO_NODATA:
            return NO_NODATA
        try:
            return float(text)
        except ValueError:
            raise InvalidInput(
                f"nodata is a number such as 0 or -9999, or 'none', got {nodata!r}"
            ) from None
    if isinstance(nodata, bool) or not isinstance(nodata, int | float | np.integer | np.floating):
        raise InvalidInput(f"nodata is a number such as 0 or -9999, or 'none', got {nodata!r}")
    return float(nodata)


def effective_nodata(asked: NodataLike, declared: float | None) -> float | None:
    """The nodata value the rule uses: the caller's, else the file's; None for 'none'."""
    asked = check_nodata(asked)
    if asked == NO_NODATA:
        return None
    return declared if asked is None else float(asked)


def invalid_pixels(
    planes: Sequence[np.ndarray], nodata: float | None, valid: np.ndarray | None = None
) -> np.ndarray | None:
    """Bool (rows, cols), True where the rule above makes a pixel invalid; None when none is.

    ``planes`` are the chosen bands (2-D each), ``valid`` GDAL's dataset mask (True = valid).
    """
    invalid = None if valid is None else ~valid
    if nodata is not None and not math.isnan(nodata):
        if all(_holds(p.dtype, nodata) for p in planes):
            same = planes[0] == planes[0].dtype.type(nodata)
            for plane in planes[1:]:
                same &= plane == plane.dtype.type(nodata)
            invalid = same if invalid is None else invalid | same
    for plane in planes:
        if plane.dtype.kind == "f":
            nan = np.isnan(plane)
            invalid = nan if invalid is None else invalid | nan
    if invalid is not None and not invalid.any():
        return None
    return invalid


def infer_fill(planes: Sequence[np.ndarray], valid: np.ndarray | None = None) -> Fill | None:
    """Unflagged fill in ``planes`` (the chosen bands of a whole scene, or a decimated read of it):
    the value that is the same in every band on at least :data:`MIN_BORDER_SHARE` of the outermost
    pixels and on at least :data:`MIN_FILL_SHARE` of all pixels; None when there is none."""
    rows, cols = planes[0].shape
    if rows < 3 or cols < 3:
        return None
    border = _border(planes[0])
    others = [_border(p) for p in planes[1:]]
    agree = np.ones(border.shape, bool)
    for other in others:
        agree &= other == border
    if valid is not None:
        agree &= _border(valid)
    if border.dtype.kind == "f":
        agree &= ~np.isnan(border)
    if not agree.any():
        return None
    candidates = border[agree]
    candidates = candidates[_sentinel(candidates, planes[0].dtype)]
    if not candidates.size:
        return None
    values, counts = np.unique(candidates, return_counts=True)
    best = int(np.argmax(counts))
    if counts[best] < MIN_BORDER_SHARE * border.size:
        return None
    value = values[best]
    same = planes[0] == value
    for plane in planes[1:]:
        same &= plane == value
    if valid is not None:
        same &= valid
    share = float(np.count_nonzero(same)) / same.size
    if share < MIN_FILL_SHARE:
        return None
    return Fill(float(value), share)


def _border(plane: np.ndarray) -> np.ndarray:
    """The outermost pixels, in one fixed order (top, bottom, then left and right columns)."""
    return np.concatenate(
        [
            np.stack([plane[0], plane[-1]]).ravel(),
            np.stack([plane[1:-1, 0], plane[1:-1, -1]]).ravel(),
        ]
    )


def _sentinel(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    keep = values == 0
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        keep |= (values == info.min) | (values == info.max)
    if dtype.kind in "if":
        keep |= values <= -999
    return keep


def _holds(dtype: np.dtype, value: float) -> bool:
    if dtype.kind == "f":
        return True
    if value != int(value):
        return False
    info = np.iinfo(dtype)
    return info.min <= value <= info.max


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"

"""Georeferencing between rasterio and napari layers: CRS text, affine <-> scale/translate, crops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def crs_text(crs) -> str | None:
    """A CRS as text: ``EPSG:<code>`` when it has one, otherwise WKT; None stays None."""
    if crs is None:
        return None
    return crs.to_string()


def affine_list(transform) -> list[float]:
    return [float(v) for v in tuple(transform)[:6]]


def transform_kwargs(transform) -> dict[str, Any]:
    """napari layer placement for a rasterio affine (pixel corners -> map), world = (-N, E)."""
    a, b, c, d, e, f = affine_list(transform)
    if b == 0 and d == 0 and e < 0:
        return {"scale": (-e, a), "translate": (-(f + 0.5 * e), c + 0.5 * a)}
    # Rotated, sheared or south-up: the whole map as a (row, col) -> (-N, E) affine matrix.
    matrix = np.array(
        [
            [-e, -d, -(f + 0.5 * d + 0.5 * e)],
            [b, a, c + 0.5 * a + 0.5 * b],
            [0.0, 0.0, 1.0],
        ]
    )
    return {"affine": matrix}


def transform_from_layer(scale: Sequence[float], translate: Sequence[float]):
    """The rasterio affine of a north-up layer placed by `transform_kwargs` (last two axes)."""
    from rasterio.transform import Affine

    sy, sx = (float(v) for v in tuple(scale)[-2:])
    ty, tx = (float(v) for v in tuple(translate)[-2:])
    return Affine(sx, 0.0, tx - 0.5 * sx, 0.0, -sy, -ty + 0.5 * sy)


def georeferencing(metadata: dict[str, Any] | None) -> tuple[Any, Any]:
    """(rasterio CRS or None, rasterio Affine or None) recorded in a layer's metadata."""
    from rasterio.crs import CRS
    from rasterio.transform import Affine

    metadata = metadata or {}
    crs = metadata.get("crs")
    transform = metadata.get("transform")
    crs = CRS.from_user_input(crs) if crs else None
    if transform is not None:
        transform = Affine(*[float(v) for v in list(transform)[:6]])
    return crs, transform


def crop_metadata(metadata: dict[str, Any] | None, row0: int, col0: int) -> dict[str, Any]:
    """Metadata of a result layer whose pixel (0, 0) is pixel (row0, col0) of the image."""
    from rasterio.transform import Affine

    metadata = metadata or {}
    out = {k: v for k, v in metadata.items() if k in ("crs", "band_names", "source", "transform")}
    _, transform = georeferencing(metadata)
    if transform is not None:
        out["transform"] = affine_list(transform @ Affine.translation(col0, row0))
    return out

"""Prompts from vector data in any CRS: exemplar boxes from polygons, interactive points from points.

A vector source is a GeoPackage / Shapefile / GeoJSON / GeoParquet / FlatGeobuf file or a
GeoDataFrame. It is reprojected to the raster's CRS; each polygon's bounds become a box
``[x1, y1, x2, y2]`` in the raster's pixels (through the raster's affine transform, so a windowed
read gets window pixels), clipped to the raster. Positive or negative comes from a label column
(default: every geometry positive).

Bad input is an error that says what to do: a file that cannot be read (named), no CRS (unless
``crs=`` says which), geometries that do not fit the prompt (points given as exemplars, polygons
given as clicks, lines: counted by type), and exemplars that all fall outside the raster.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import pyproj
from rasterio.transform import Affine

from napari_sam3.core.errors import BadData, InvalidInput, InvalidType, MissingFile, RefusedError
from napari_sam3.core.formats import read_vector_file
from napari_sam3.imagery.raster import Raster, RasterInfo, raster_info

__all__ = [
    "VectorPrompt",
    "exemplar_boxes",
    "interactive_points",
    "read_vectors",
    "source_name",
]

_POLYGONS = {"Polygon", "MultiPolygon"}
_POINTS = {"Point", "MultiPoint"}
_POSITIVE = {"1", "true", "yes", "positive", "pos", "+", "t", "y"}
_NEGATIVE = {"0", "false", "no", "negative", "neg", "-", "f", "n", "-1"}


@dataclass(frozen=True)
class VectorPrompt:
    """Vector data with the options to turn it into prompts (the ``exemplars=`` of the client).

    ``source``: a vector file or a GeoDataFrame. ``label_column``: the column saying positive /
    negative (1/0, true/false, positive/negative, +/-). ``crs``: the CRS of a source that has
    none (anything pyproj accepts); refused when the source has a different one.
    """

    source: Any
    label_column: str | None = None
    crs: Any = None


class ExemplarsOutside(RefusedError, ValueError):
    """Every exemplar falls outside the raster."""


def read_vectors(source: Any, crs: Any = None) -> gpd.GeoDataFrame:
    """A vector file (read with pyogrio; GeoParquet with pyarrow) or a GeoDataFrame, with a CRS."""
    if isinstance(source, VectorPrompt):
        crs = source.crs if crs is None else crs
        source = source.source
    if isinstance(source, gpd.GeoDataFrame):
        gdf = source
        name = "the GeoDataFrame"
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        name = str(path)
        if not path.exists():
            raise MissingFile(f"vector file {path} does not exist")
        try:
            gdf = read_vector_file(path)
        except Exception as exc:  # pyogrio, pyarrow and GDAL raise many kinds
            raise BadData(
                f"cannot read vector file {path}: {type(exc).__name__}: {exc}. Give a valid "
                f"GeoPackage, Shapefile, GeoJSON, GeoParquet or FlatGeobuf file"
            ) from exc
    else:
        raise InvalidType(
            "exemplars must be a vector file's path, a GeoDataFrame or a VectorPrompt, got "
            f"{type(source).__name__}"
        )
    if crs is not None:
        try:
            given = pyproj.CRS.from_user_input(crs)
        except pyproj.exceptions.CRSError as exc:
            raise InvalidInput(f"exemplars CRS {crs!r} is not a CRS pyproj understands") from exc
        if gdf.crs is None:
            gdf = gdf.set_crs(given)
        elif not gdf.crs.equals(given):
            raise InvalidInput(
                f"{name} already has the CRS {gdf.crs.to_string()}; the CRS given for it "
                f"({given.to_string()}) is only for files without one"
            )
    if gdf.crs is None:
        raise InvalidInput(
            f"{name} has no CRS, so its coordinates cannot be placed on the raster; say which "
            "CRS they are in (--exemplars-crs EPSG:4326, or crs= in the library), or fix the "
            "file (e.g. add its .prj)"
        )
    return gdf


def _to_crs(gdf: Any, crs: pyproj.CRS, name: str) -> Any:
    """``gdf`` in the raster's CRS; a pair of CRSs PROJ cannot transform between (a local or
    engineering CRS, such as LOCAL_CS) is refused in one line."""
    try:
        return gdf.to_crs(crs)
    except pyproj.exceptions.ProjError:
        raise InvalidInput(
            f"{name} cannot be reprojected from {gdf.crs.name!r} to the raster's CRS "
            f"{crs.name!r} (a local CRS has no transformation to any other): give the "
            "exemplars in the raster's own CRS, or georeference the raster"
        ) from None


def _georeference(raster: Any) -> tuple[pyproj.CRS, Affine, tuple[int, int]]:
    if isinstance(raster, str | os.PathLike | list | tuple):
        raster = raster_info(raster)
    if not isinstance(raster, Raster | RasterInfo):
        raise InvalidType(
            "prompts from vector data need the raster's georeferencing: give a raster path, a "
            f"Raster (read_raster) or a RasterInfo, not {type(raster).__name__}"
        )
    if raster.crs is None:
        raise InvalidInput(
            f"the raster {raster.path} has no CRS, so vector prompts cannot be placed on it; "
            "give pixel boxes instead"
        )
    crs = pyproj.CRS.from_user_input(raster.crs.to_wkt())
    return crs, raster.transform, (int(raster.shape[1]), int(raster.shape[2]))


def _labels(gdf: gpd.GeoDataFrame, column: str | None, name: str) -> np.ndarray:
    if column is None:
        return np.ones(len(gdf), np.int64)
    if column not in gdf.columns:
        raise InvalidInput(
            f"{name} has no column {column!r}; its columns: "
            f"{[c for c in gdf.columns if c != gdf.geometry.name]}"
        )
    out = np.empty(len(gdf), np.int64)
    for i, value in enumerate(gdf[column]):
        text = str(value).strip().lower()
        if isinstance(value, bool | np.bool_):
            text = "true" if value else "false"
        elif isinstance(value, int | float | np.number) and not pd.isna(value):
            text = str(int(value)) if float(value) == int(value) else text
        if text in _POSITIVE:
            out[i] = 1
        elif text in _NEGATIVE:
            out[i] = 0
        else:
            raise InvalidInput(
                f"{name}, row {i}: label {value!r} in column {column!r} is neither positive "
                "(1, true, positive, +) nor negative (0, false, negative, -)"
            )
    return out


def _refuse_types(gdf: gpd.GeoDataFrame, allowed: set[str], what: str, hint: str) -> None:
    types = gdf.geometry.geom_type.fillna("empty")
    if gdf.geometry.is_empty.any():
        types = types.where(~gdf.geometry.is_empty, "empty")
    bad = types[~types.isin(allowed)].value_counts()
    if len(bad):
        counts = ", ".join(f"{n} {t}" for t, n in bad.items())
        raise InvalidInput(
            f"{what}: only {' / '.join(sorted(allowed))} geometries can be used, and it also "
            f"holds {counts}. {hint}"
        )


def _pixels(transform: Affine, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    inverse = ~transform
    cols = inverse.a * xs + inverse.b * ys + inverse.c
    rows = inverse.d * xs + inverse.e * ys + inverse.f
    return cols, rows


def exemplar_boxes(
    exemplars: Any,
    raster: Any,
    label_column: str | None = None,
    crs: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(boxes ``(N, 4)`` float32 ``[x1, y1, x2, y2]`` in the raster's pixels, labels ``(N,)``).

    Polygons (and boxes) become their bounds, clipped to the raster; those entirely outside it
    are left out, and if none is left that is an error naming how many fell outside.
    """
    if isinstance(exemplars, VectorPrompt):
        label_column = exemplars.label_column if label_column is None else label_column
    gdf = read_vectors(exemplars, crs)
    name = source_name(exemplars)
    if not len(gdf):
        raise InvalidInput(f"{name} holds no geometries to use as exemplars")
    _refuse_types(
        gdf,
        _POLYGONS,
        f"exemplars from {name}",
        "Exemplars are boxes: give polygons or rectangles (points are clicks for the "
        "interactive tool, interactive_points); filter the layer, e.g. "
        "gdf[gdf.geom_type.isin(['Polygon', 'MultiPolygon'])]",
    )
    labels = _labels(gdf, label_column, name)
    raster_crs, transform, (rows, cols) = _georeference(raster)
    gdf = _to_crs(gdf, raster_crs, name)
    # Each bounding box's four corners -> pixels (a rotated grid turns them; take their bounds).
    b = gdf.geometry.bounds.to_numpy(dtype=np.float64)
    xs = b[:, [0, 2, 2, 0]]
    ys = b[:, [1, 1, 3, 3]]
    px, py = _pixels(transform, xs, ys)
    boxes = np.stack([px.min(1), py.min(1), px.max(1), py.max(1)], axis=1)
    inside = (boxes[:, 2] > 0) & (boxes[:, 0] < cols) & (boxes[:, 3] > 0) & (boxes[:, 1] < rows)
    if not inside.any():
        raise ExemplarsOutside(
            f"all {len(boxes)} exemplars from {name} fall outside the raster "
            f"({cols} x {rows} pixels, {raster_crs.to_string()}): is it the right file, or the "
            "right CRS?"
        )
    boxes = boxes[inside]
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, cols)
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, rows)
    return boxes.astype(np.float32), labels[inside]


def interactive_points(
    points: Any,
    raster: Any,
    label_column: str | None = None,
    crs: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(points ``(N, 2)`` float32 ``[x, y]`` in the raster's pixels, labels ``(N,)``) from a point
    layer (MultiPoints give each of their points); points outside the raster are an error."""
    if isinstance(points, VectorPrompt):
        label_column = points.label_column if label_column is None else label_column
    gdf = read_vectors(points, crs)
    name = source_name(points)
    _refuse_types(
        gdf,
        _POINTS,
        f"clicks from {name}",
        "Clicks are points; polygons are exemplars (exemplar_boxes)",
    )
    labels = _labels(gdf, label_column, name)
    raster_crs, transform, (rows, cols) = _georeference(raster)
    parts = _to_crs(gdf.assign(_label=labels), raster_crs, name).explode(index_parts=False)
    px, py = _pixels(transform, parts.geometry.x.to_numpy(), parts.geometry.y.to_numpy())
    outside = ~((px >= 0) & (px < cols) & (py >= 0) & (py < rows))
    if outside.any():
        raise InvalidInput(
            f"{int(outside.sum())} of {len(px)} points from {name} fall outside the raster "
            f"({cols} x {rows} pixels, {raster_crs.to_string()})"
        )
    return np.stack([px, py], 1).astype(np.float32), parts["_label"].to_numpy(np.int64)


def source_name(source: Any) -> str:
    """How messages name a vector source: its path, or "the GeoDataFrame"."""
    if isinstance(source, VectorPrompt):
        source = source.source
    return str(source) if isinstance(source, str | os.PathLike) else "the GeoDataFrame"


def as_vector_prompt(
    exemplars: Any, label_column: str | None = None, crs: Any = None
) -> VectorPrompt:
    """``exemplars`` (a path, a GeoDataFrame or a VectorPrompt) as a VectorPrompt."""
    if isinstance(exemplars, VectorPrompt):
        return exemplars
    return VectorPrompt(exemplars, label_column, crs)


def combine_boxes(
    boxes: Any, labels: Any, more: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Pixel boxes given directly plus those from vector exemplars."""
    if boxes is None or len(boxes) == 0:
        return more
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    labels = np.ones(len(boxes), np.int64) if labels is None else np.asarray(labels, np.int64)
    return np.concatenate([boxes, more[0]]), np.concatenate([labels, more[1]])


def georeferenced(image: Any) -> Any:
    """The georeferenced raster behind a client's ``image`` argument, or an error saying why
    vector exemplars cannot be placed on it."""
    if isinstance(image, str | os.PathLike) or (
        isinstance(image, Sequence) and not isinstance(image, str | np.ndarray)
    ):
        return raster_info(image)
    if isinstance(image, Raster | RasterInfo):
        return image
    raise InvalidType(
        "vector exemplars are in map coordinates, so the image must be georeferenced: give the "
        f"raster's path or a Raster from read_raster, not a {type(image).__name__} (or give "
        "pixel exemplar_boxes)"
    )

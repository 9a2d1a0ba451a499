"""The napari reader of vector files: polygons as a Shapes layer and points as a Points layer, in the raster's map units."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_sam3.core.errors import InvalidInput
from napari_sam3.core.formats import NAPARI_VECTOR_INPUTS
from napari_sam3.plugin.georef import crs_text
from napari_sam3.plugin.reader import METADATA_VERSION, SAM3_KEY, WORLD_CONVENTION, LayerData


def get_vector_reader(path: str | Sequence[str]) -> Callable[[Any], list[LayerData]] | None:
    """npe2 reader hook for vector files: polygons and lines as a Shapes layer, points as a
    Points layer, in map units (the world convention above), so they line up with rasters of
    the same CRS and can be used as exemplar (or click) layers."""
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if len(paths) != 1 or Path(paths[0]).suffix.lower() not in NAPARI_VECTOR_INPUTS:
        return None
    return _read_vectors_or_notify


def _read_vectors_or_notify(path: str | Sequence[str]) -> list[LayerData]:
    path = path if isinstance(path, str | os.PathLike) else path[0]
    try:
        return vector_layers(path)
    except (ValueError, OSError, TypeError) as exc:
        from napari.utils.notifications import show_error

        show_error(f"napari-sam3 could not open {path}: {exc}")
        return [(None,)]


def vector_layers(path: str | os.PathLike, crs: Any = None) -> list[LayerData]:
    """A vector file as napari layer tuples in map units of its CRS (or of ``crs``, reprojected).

    Vertices are world ``(y, x) = (-northing, easting)``; every scalar attribute becomes a layer
    feature; MultiPolygons give one shape per part (their row repeated). A file without a CRS is
    refused (it cannot be placed on a map).
    """
    from napari_sam3.prompts.vector import read_vectors

    gdf = read_vectors(path)
    if crs is not None:
        gdf = gdf.to_crs(crs)
    gdf = gdf[~gdf.geometry.is_empty & gdf.geometry.notna()]
    parts = gdf.explode(index_parts=False).reset_index(drop=True)
    kinds = parts.geometry.geom_type
    columns = [c for c in parts.columns if c != parts.geometry.name]
    features = parts[columns].copy()
    for name in columns:
        if features[name].dtype == object:
            features[name] = features[name].map(lambda v: v if v is None else str(v))
    meta = {
        "crs": crs_text(gdf.crs),
        "source": str(path),
        SAM3_KEY: {"version": METADATA_VERSION, "kind": "vectors", "world": WORLD_CONVENTION},
    }
    base = Path(path).stem
    layers: list[LayerData] = []
    shaped = kinds.isin(["Polygon", "LineString", "LinearRing"]).to_numpy()
    if shaped.any():
        data, shape_types = [], []
        for geom in parts.geometry[shaped]:
            ring = geom.exterior.coords if geom.geom_type == "Polygon" else geom.coords
            xy = np.asarray(ring, dtype=np.float64)[:, :2]
            if geom.geom_type == "Polygon":
                xy = xy[:-1]  # napari closes polygons itself
            data.append(np.stack([-xy[:, 1], xy[:, 0]], axis=1))
            shape_types.append("polygon" if geom.geom_type == "Polygon" else "path")
        kwargs = {
            "name": base,
            "shape_type": shape_types,
            "features": features[shaped].reset_index(drop=True),
            "metadata": meta,
            "edge_color": "yellow",
            "face_color": "transparent",
        }
        layers.append((data, kwargs, "shapes"))
    points = (kinds == "Point").to_numpy()
    if points.any():
        geoms = parts.geometry[points]
        data = np.stack([-geoms.y.to_numpy(), geoms.x.to_numpy()], axis=1)
        kwargs = {
            "name": f"{base} points" if shaped.any() else base,
            "features": features[points].reset_index(drop=True),
            "metadata": meta,
        }
        layers.append((data, kwargs, "points"))
    if not layers:
        raise InvalidInput(f"{path} holds no polygons, lines or points to show")
    return layers

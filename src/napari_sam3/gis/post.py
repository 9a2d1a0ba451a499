"""Vector post-processing of detection polygons (all steps off by default).

Steps run in this order, each only when asked: minimum area (m² or pixels), hole filling,
building regularisation (``buildingregulariser``: edges squared to the building's main
directions), smoothing (``smoothify``: Chaikin corner cutting of the pixel staircase), and
simplification (Douglas-Peucker, tolerance in CRS units). ``area_m2`` is measured again on the
final polygons; ``area_px`` stays the mask's pixel count. The steps done are recorded in the
``postprocess`` column.
"""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import shapely
from shapely.geometry import MultiPolygon, Polygon

from napari_sam3.core.errors import InvalidInput, MissingDependency
from napari_sam3.prompts.query import PostProcess

__all__ = ["PostProcess", "postprocess"]


def _fill(geom):
    if isinstance(geom, Polygon):
        return Polygon(geom.exterior)
    if isinstance(geom, MultiPolygon):
        return MultiPolygon([Polygon(p.exterior) for p in geom.geoms])
    return geom


def _as_multi(geom):
    if isinstance(geom, Polygon):
        return MultiPolygon([geom])
    if isinstance(geom, MultiPolygon) or geom is None:
        return geom
    polygons = [g for g in getattr(geom, "geoms", []) if isinstance(g, Polygon)]
    return MultiPolygon(polygons)


def _require(module: str, flag: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{flag} needs the {module} package: pip install {module} "
            "(or pip install 'napari-sam3[gis-post]')"
        ) from exc


def _pixel_size(gdf: gpd.GeoDataFrame) -> float | None:
    """The pixel side in CRS units, from area_m2 / area_px of the raw polygons (None if unknown)."""
    if "area_px" not in gdf or not len(gdf):
        return None
    px = gdf["area_px"].to_numpy(dtype=float)
    area = gdf.geometry.area.to_numpy(dtype=float)
    ok = px > 0
    return float(np.sqrt(np.median(area[ok] / px[ok]))) if ok.any() else None


def postprocess(
    gdf: gpd.GeoDataFrame, options: PostProcess | None = None, **kwargs
) -> gpd.GeoDataFrame:
    """A copy of ``gdf`` (from ``to_geodataframe`` / ``scene_geodataframe``) post-processed.

    Give a :class:`PostProcess` or its fields as keywords. Regularisation and smoothing need a
    projected CRS (lengths in metres): a geographic one is refused with what to do.
    """
    options = options or PostProcess(**kwargs)
    out = gdf.copy()
    if not options.steps or not len(out):
        return out
    if (options.regularize or options.smooth or options.simplify) and (
        out.crs is None or not out.crs.is_projected
    ):
        raise InvalidInput(
            "regularisation, smoothing and simplification work in map units and need a "
            f"projected CRS; these polygons are in {out.crs or 'pixel coordinates (no CRS)'}: "
            "reproject them first, e.g. gdf.to_crs(gdf.estimate_utm_crs())"
        )
    pixel = _pixel_size(out)
    if options.min_area_px:
        out = out[out["area_px"].to_numpy() >= options.min_area_px]
    if options.min_area_m2:
        if "area_m2" not in out or out["area_m2"].isna().all():
            raise InvalidInput("min_area_m2 needs polygons with a CRS (area_m2); use min_area_px")
        out = out[out["area_m2"].to_numpy() >= options.min_area_m2]
    out = out.copy()
    if options.fill_holes:
        out.geometry = out.geometry.map(_fill)
    if options.regularize and len(out):
        regularize_geodataframe = _require(
            "buildingregulariser", "regularize"
        ).regularize_geodataframe
        tolerance = 0.5 * (pixel or 1.0)
        # it explodes multi-part polygons (and resets the index): rows are joined back by _row
        frame = gpd.GeoDataFrame(
            {"_row": np.arange(len(out))}, geometry=out.geometry.to_numpy(), crs=out.crs
        )
        regular = regularize_geodataframe(
            frame,
            parallel_threshold=2 * tolerance,
            simplify_tolerance=tolerance,
            num_cores=1,
        )
        joined = regular.groupby("_row")[regular.geometry.name].agg(shapely.union_all)
        geoms = [joined.get(i, MultiPolygon()) for i in range(len(out))]
        out.geometry = gpd.GeoSeries(geoms, index=out.index, crs=out.crs)
    if options.smooth and len(out):
        smoothify = _require("smoothify", "smooth").smoothify
        smooth = smoothify(
            out[[out.geometry.name]], segment_length=pixel, num_cores=1, merge_collection=False
        )
        out.geometry = gpd.GeoSeries(smooth.geometry.to_numpy(), index=out.index, crs=out.crs)
    if options.simplify:
        out.geometry = out.geometry.simplify(options.simplify, preserve_topology=True)
    out.geometry = out.geometry.map(_as_multi)
    if "area_m2" in out:
        from napari_sam3.gis.vector import _area_m2

        out["area_m2"] = _area_m2(out.geometry, out.crs)
    out["postprocess"] = ",".join(options.steps)
    return out.reset_index(drop=True)

"""An area of interest: the part of a scene a run covers, and the tiles that touch it.

An AOI is a bounding box ``(minx, miny, maxx, maxy)`` in EPSG:4326 (longitude, latitude) unless
another CRS is named (:class:`Bbox`, or the text ``"minx,miny,maxx,maxy[,CRS]"`` of ``--bbox``),
or the features of a vector file / GeoDataFrame / GeoSeries in their own CRS (their bounds). It is
reprojected to the raster's CRS (its edges densified, so a box in degrees becomes the box that
holds it) and turned into a window of the scene's pixels (of the ``gsd`` grid when there is one).
A run then reads and segments only the tiles of the scene's grid that touch that window: the same
tiles, with the same numbers, as a run over the whole scene.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from napari_sam3.core.errors import InvalidInput, Sam3Error
from napari_sam3.core.formats import VECTOR_INPUTS, read_vector_file
from napari_sam3.imagery.placement import crosses_antimeridian
from napari_sam3.imagery.raster import RasterInfo
from napari_sam3.scene.tiles import Tile

__all__ = [
    "AoiError",
    "Bbox",
    "aoi_extent",
    "aoi_window",
    "lonlat_bounds",
    "lonlat_range",
    "parse_bbox",
    "tiles_touching",
]

DEFAULT_CRS = "EPSG:4326"
Window = tuple[int, int, int, int]  # r0, c0, r1, c1 (ends exclusive)


class AoiError(Sam3Error, ValueError):
    """An area of interest that is malformed or lies outside the scene."""


@dataclass(frozen=True)
class Bbox:
    """``(minx, miny, maxx, maxy)`` in ``crs`` (default EPSG:4326: longitude, latitude)."""

    minx: float
    miny: float
    maxx: float
    maxy: float
    crs: str = DEFAULT_CRS

    def __post_init__(self) -> None:
        values = (self.minx, self.miny, self.maxx, self.maxy)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise AoiError(f"a bbox is four numbers minx,miny,maxx,maxy, got {values!r}")
        if not all(math.isfinite(v) for v in values):
            raise AoiError(f"a bbox needs finite numbers, got {values!r}")
        crs = _crs(self.crs)
        if crs.is_geographic and not (
            all(-180 <= x <= 180 for x in (self.minx, self.maxx))
            and all(-90 <= y <= 90 for y in (self.miny, self.maxy))
        ):
            raise AoiError(
                f"bbox {_text(values)} is not longitude/latitude in {self.crs} (longitudes "
                "-180..180, latitudes -90..90); name its CRS: minx,miny,maxx,maxy,EPSG:32633"
            )
        crossing = crs.is_geographic and self.minx > self.maxx
        if crossing:  # west above east: across the antimeridian, or two numbers swapped
            try:
                crosses_antimeridian(self.minx, self.maxx, f"bbox {_text(values)}")
            except InvalidInput as error:
                raise AoiError(str(error)) from None
        if (self.minx >= self.maxx and not crossing) or self.miny >= self.maxy:
            raise AoiError(
                f"bbox {_text(values)}: minx must be below maxx and miny below maxy "
                "(the order is minx,miny,maxx,maxy, e.g. west,south,east,north; longitude and "
                "latitude areas across the antimeridian have west above east)"
            )

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return self.minx, self.miny, self.maxx, self.maxy


def parse_bbox(text: str) -> Bbox:
    """``"minx,miny,maxx,maxy[,CRS]"`` -> :class:`Bbox` (the CRS as EPSG:n, or any text pyproj
    takes)."""
    if not isinstance(text, str):
        raise AoiError(f"a bbox is text minx,miny,maxx,maxy[,CRS], got {text!r}")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (4, 5) or not all(parts[:4]):
        raise AoiError(
            f"--bbox {text!r}: give minx,miny,maxx,maxy with an optional CRS, e.g. "
            "14.2,52.3,14.4,52.5 (longitude, latitude) or 330000,5812000,335000,5816000,EPSG:32633"
        )
    try:
        numbers = [float(p) for p in parts[:4]]
    except ValueError:
        raise AoiError(f"--bbox {text!r}: minx,miny,maxx,maxy must be numbers") from None
    return Bbox(*numbers, crs=parts[4] if len(parts) == 5 and parts[4] else DEFAULT_CRS)


def aoi_window(aoi: Any, info: RasterInfo) -> Window:
    """The window ``(r0, c0, r1, c1)`` of ``info``'s pixels that holds the AOI, clipped to the
    scene; AoiError where the AOI is malformed or misses the scene."""
    from rasterio.windows import from_bounds

    if info.crs is None:
        raise AoiError(
            "the raster has no CRS, so an area of interest in map coordinates cannot be placed "
            "on it; give a georeferenced raster, or leave the AOI out"
        )
    bounds, crs, label = _bounds(aoi, info.crs)
    if bounds[0] > bounds[2]:  # longitudes across the antimeridian, on a raster in degrees
        bounds = _one_side(bounds, info)
    elif info.crs.is_geographic:
        bounds = _whole_turn(bounds, info)
    win = from_bounds(*bounds, transform=info.transform)
    r0, c0 = math.floor(win.row_off + 1e-9), math.floor(win.col_off + 1e-9)
    r1 = math.ceil(win.row_off + win.height - 1e-9)
    c1 = math.ceil(win.col_off + win.width - 1e-9)
    r0, c0, r1, c1 = max(r0, 0), max(c0, 0), min(r1, info.rows), min(c1, info.cols)
    if r0 >= r1 or c0 >= c1:
        raise AoiError(
            f"the area of interest {label} lies outside the scene, which covers "
            f"{_text(_scene_bounds(info, crs))} in {crs}; check the coordinates and their CRS"
        )
    return r0, c0, r1, c1


def aoi_extent(aoi: Any) -> tuple[tuple[float, float, float, float], str]:
    """The AOI's bounds in its own CRS, and that CRS: what a source without a grid of its own
    yet (a basemap service, :mod:`napari_sam3.imagery.basemap`) is cut to."""
    if isinstance(aoi, str) and not _is_file(aoi):
        aoi = parse_bbox(aoi)
    if isinstance(aoi, Bbox):
        return aoi.bounds, aoi.crs
    frame, label = _vector(aoi)
    if frame.crs is None:
        raise AoiError(f"{label} has no CRS; give the area of interest a CRS")
    if frame.empty or frame.geometry.is_empty.all():
        raise AoiError(f"{label} holds no geometry")
    return tuple(float(v) for v in frame.total_bounds), frame.crs.to_string()


def lonlat_bounds(aoi: Any) -> tuple[float, float, float, float]:
    """The AOI's bounds in longitude/latitude (west, south, east, north): the area a STAC API
    search covers."""
    return lonlat_range(*_bounds(aoi, _crs(DEFAULT_CRS))[0])


def lonlat_range(west: float, south: float, east: float, north: float):
    """Bounds in degrees as a lon/lat bbox has them: longitudes written past 180 (0..360) or
    below -180 to stay continuous (vector files, rasters, maps) taken round to -180..180, so
    that one across 180 has west above east; all the way round is -180..180; latitudes within
    -90..90 (a map zoomed out shows more)."""
    if east - west >= 360.0:
        west, east = -180.0, 180.0
    west, east = ((v + 180.0) % 360.0 - 180.0 if abs(v) > 180.0 else v for v in (west, east))
    return west, max(south, -90.0), east, min(north, 90.0)


def tiles_touching(tiles: Sequence[Tile], window: Window) -> list[Tile]:
    """The tiles that share at least one pixel with ``window``, in grid order."""
    r0, c0, r1, c1 = window
    return [
        t
        for t in tiles
        if t.row < r1 and t.row + t.height > r0 and t.col < c1 and t.col + t.width > c0
    ]


# ----------------------------------------------------------------------------- internals


def _crs(text: Any):
    from rasterio.crs import CRS
    from rasterio.errors import CRSError

    try:
        return CRS.from_user_input(text)
    except (CRSError, ValueError, TypeError):
        raise AoiError(f"unknown CRS {text!r}; give e.g. EPSG:4326 or EPSG:32633") from None


def _bounds(aoi: Any, target: Any) -> tuple[tuple[float, float, float, float], str, str]:
    """(the AOI's bounds in the ``target`` CRS, the AOI's own CRS, how to name it)."""
    from rasterio.warp import transform_bounds

    if isinstance(aoi, str) and not _is_file(aoi):
        aoi = parse_bbox(aoi)
    if isinstance(aoi, Sequence) and not isinstance(aoi, str):
        if len(aoi) not in (4, 5):
            raise AoiError(f"a bbox is (minx, miny, maxx, maxy[, crs]), got {aoi!r}")
        try:
            numbers = [float(v) for v in aoi[:4]]
        except (TypeError, ValueError):
            raise AoiError(f"a bbox is four numbers minx, miny, maxx, maxy, got {aoi!r}") from None
        aoi = Bbox(*numbers, crs=str(aoi[4]) if len(aoi) == 5 else DEFAULT_CRS)
    if isinstance(aoi, Bbox):
        crs = _crs(aoi.crs)
        bounds = transform_bounds(crs, target, *aoi.bounds, densify_pts=21)
        return bounds, aoi.crs, f"bbox {_text(aoi.bounds)} ({aoi.crs})"
    frame, label = _vector(aoi)
    if frame.crs is None:
        raise AoiError(f"{label} has no CRS; give the area of interest a CRS")
    if frame.empty or frame.geometry.is_empty.all():
        raise AoiError(f"{label} holds no geometry")
    if not _crs(target).is_geographic:  # each vertex projected: bounds on the target's grid
        bounds = tuple(float(v) for v in frame.to_crs(target).total_bounds)
    else:  # PROJ's bounds, which say west above east where the area crosses the antimeridian
        own = _lonlat_extent(frame) if frame.crs.is_geographic else frame.total_bounds
        bounds = transform_bounds(frame.crs, target, *own, densify_pts=21)
    return bounds, frame.crs.to_string(), label


def _lonlat_extent(frame) -> tuple[float, float, float, float]:
    """The bounds of geometries in degrees, west above east where the shortest way round that
    holds them all crosses the antimeridian (parts drawn either side of it, as GeoJSON must)."""
    _, south, _, north = (float(v) for v in frame.total_bounds)
    boxes = frame.geometry.bounds.dropna().to_numpy()
    spans = sorted(((w + 180.0) % 360.0 - 180.0, e - w) for w, _, e, _ in boxes)
    if max(width for _, width in spans) >= 180.0:
        west, _, east, _ = (float(v) for v in frame.total_bounds)
        return west, south, east, north
    # the widest stretch of longitude that no geometry touches; the area is all the rest
    first = spans[0][0]
    reach = first + spans[0][1]
    gap_start, gap_end = reach, reach  # none yet
    for start, width in spans[1:]:
        if start - reach > gap_end - gap_start:
            gap_start, gap_end = reach, start
        reach = max(reach, start + width)
    if first + 360.0 - reach >= gap_end - gap_start:  # the stretch back round to the first
        gap_start, gap_end = reach, first + 360.0
    west, east = gap_end % 360.0, gap_start
    west, east = ((v + 180.0) % 360.0 - 180.0 for v in (west, east))
    if east == -180.0 and west < 180.0:
        east = 180.0
    return west, south, east, north


def _one_side(bounds, info: RasterInfo) -> tuple[float, float, float, float]:
    """A west-above-east longitude range as one range on ``info``'s own longitudes: continued
    past 180 for a raster written in 0..360, else the side(s) the raster covers (both: its
    whole width, the window being one rectangle)."""
    from rasterio.transform import array_bounds

    west, south, east, north = bounds
    scene_west, _, scene_east, _ = array_bounds(info.rows, info.cols, info.transform)
    if scene_east > 180.0:
        return west, south, east + 360.0, north
    if scene_west < -180.0:
        return west - 360.0, south, east, north
    sides = [
        (w, e) for w, e in ((west, 180.0), (-180.0, east)) if w < scene_east and e > scene_west
    ]
    if len(sides) != 1:
        return scene_west, south, scene_east, north
    return sides[0][0], south, sides[0][1], north


def _whole_turn(bounds, info: RasterInfo) -> tuple[float, float, float, float]:
    """Longitudes moved by a whole turn onto a raster in degrees written past 180 (0..360) or
    before -180, where only so they meet it: 185..188 east is -175..-172 in GeoJSON's terms."""
    from rasterio.transform import array_bounds

    west, south, east, north = bounds
    scene_west, _, scene_east, _ = array_bounds(info.rows, info.cols, info.transform)
    for turn in (0.0, 360.0, -360.0):
        if west + turn < scene_east and east + turn > scene_west:
            return west + turn, south, east + turn, north
    return bounds


def _is_file(text: str) -> bool:
    return os.path.exists(text) or Path(text).suffix.lower() in VECTOR_INPUTS


def _vector(aoi: Any):
    import geopandas as gpd

    if isinstance(aoi, gpd.GeoDataFrame | gpd.GeoSeries):
        frame = aoi if isinstance(aoi, gpd.GeoDataFrame) else gpd.GeoDataFrame(geometry=aoi)
        return frame, "the area of interest"
    if isinstance(aoi, str | os.PathLike):
        path = Path(aoi)
        if not path.is_file():
            raise AoiError(f"area of interest {path}: no such file")
        try:
            return read_vector_file(path), path.name
        except Exception as error:  # any reader failure: named, with what to do
            raise AoiError(f"cannot read the area of interest {path.name}: {error}") from None
    raise AoiError(
        "an area of interest is a bbox (minx, miny, maxx, maxy), a Bbox, a vector file or a "
        f"GeoDataFrame; got {type(aoi).__name__}"
    )


def _scene_bounds(info: RasterInfo, crs: str) -> tuple[float, float, float, float]:
    from rasterio.transform import array_bounds
    from rasterio.warp import transform_bounds

    west, south, east, north = array_bounds(info.rows, info.cols, info.transform)
    return transform_bounds(info.crs, _crs(crs), west, south, east, north, densify_pts=21)


def _text(values: Sequence[float]) -> str:
    return ",".join(f"{v:.6g}" for v in values)

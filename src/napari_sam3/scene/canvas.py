"""A map canvas's prompts on a georeferenced raster, in map coordinates (the QGIS dock's engine).

Plain functions and one state object, :class:`Canvas`, that a long-lived process keeps: the
client, the rasters opened (each read's decisions made once, :mod:`~napari_sam3.scene.view`)
and the interactive sessions. Every coordinate is in the raster's CRS; polygons come back as WKT
in it.

A click (or box) segments the window of ``client.image_size`` pixels of the raster around it at
its native resolution (a coarser grid for a box larger than that). Windows sit on a grid of half
a window, so nearby clicks share a window and its features stay in the client's feature cache:
the next click there runs only the prompt decoder. A ``token`` names a result, and a click given
``previous`` continues that object (its window, its prompts, its best mask as the mask input),
as :class:`~napari_sam3.client.interactive.InteractiveSession` does.

Keywords and exemplars over an extent run :func:`~napari_sam3.scene.driver.segment_with_provenance`
with the extent as the area of interest: the tiles of the scene's own grid that touch it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rasterio import Affine

from napari_sam3.core.errors import InvalidInput, OutOfRange, UnknownKey
from napari_sam3.imagery.raster import RasterInfo, pixel_metres, raster_info
from napari_sam3.masks.protocol import as_mask
from napari_sam3.prompts.keywords import check_keyword
from napari_sam3.scene.tiles import Tile
from napari_sam3.scene.view import SceneView, scene_view

__all__ = ["Canvas", "OpenedRaster", "click_window"]

MAX_CANDIDATES = 3
# a box wider than this share of a window is segmented on a coarser grid that holds it
LARGE_BOX = 0.8
# results a later click may refine (each holds its window's prepared image, a few MB)
KEPT_RESULTS = 32
# windows kept prepared (a full-size one is 1008 x 1008 x 3 bytes), so that the next click
# there pays only the prompt decoder
KEPT_WINDOWS = 4


@dataclass(frozen=True)
class OpenedRaster:
    """A raster as the canvas uses it: its header, and how its pixels reach the model."""

    key: str
    source: str
    bands: tuple | None
    info: RasterInfo
    view: SceneView

    def describe(self) -> dict[str, Any]:
        info = self.info
        t = info.transform
        west, north = t * (0, 0)
        east, south = t * (info.cols, info.rows)
        return {
            "image": self.key,
            "crs": info.crs.to_wkt(),
            "width": info.cols,
            "height": info.rows,
            "transform": [t.a, t.b, t.c, t.d, t.e, t.f],
            "bounds": [min(west, east), min(north, south), max(west, east), max(north, south)],
        }


@dataclass
class _Object:
    """One object being refined: its window, its session, the prompts given so far."""

    image: str
    grid: RasterInfo  # the grid the window is read from (the raster's own, or a coarser one)
    gsd: float | None
    tile: Tile
    session: Any
    invalid: np.ndarray | None  # the window's pixels that are fill
    points: tuple[tuple[float, float, int], ...]
    box: tuple[float, float, float, float] | None
    state: Any  # the session's prompts after this result
    frame: Any = None  # the result's candidates (their polygons made when asked)


def open_raster(source: str, bands: Sequence[Any] | None = None) -> OpenedRaster:
    """A raster opened for the canvas: its header and its read decisions (bands, validity,
    stretch) made once; refused when it has no CRS (nothing could be placed on the map)."""
    info = raster_info(source)
    if info.crs is None:
        raise InvalidInput(
            f"the raster {source} has no CRS, so its polygons cannot be placed on the map: "
            "assign it one (in QGIS: Layer Properties > Source; or gdal_edit.py -a_srs "
            "EPSG:XXXX FILE) and open it again"
        )
    chosen = tuple(bands) if bands else None
    view = scene_view(source, info, chosen)
    key = hashlib.sha256(repr((source, chosen)).encode()).hexdigest()[:16]
    return OpenedRaster(key, source, chosen, info, view)


def click_window(col: float, row: float, cols: int, rows: int, size: int) -> tuple[int, int]:
    """The (row, col) origin of the ``size`` window holding pixel (col, row): on a grid of half
    a window, the point at least a quarter window from its edges where the raster allows."""
    # a whole number of pixels: a grid of size / 2 put odd windows on half pixels, and cutting
    # those to whole ones took up to half a pixel of the far margin
    step = max(size // 2, 1)

    def start(at: float, length: int) -> int:
        if length <= size:
            return 0
        snapped = round((at - size / 2) / step) * step
        return int(min(max(snapped, 0), length - size))

    return start(row, rows), start(col, cols)


class Canvas:
    """The state of a canvas engine: one client, the rasters opened, the objects refined."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.images: dict[str, OpenedRaster] = {}
        self._objects: dict[str, _Object] = {}
        self._windows: dict[tuple, tuple[Any, np.ndarray | None]] = {}  # the last windows read
        self._tokens = itertools.count(1)

    def open(self, source: str, bands: Sequence[Any] | None = None) -> OpenedRaster:
        opened = open_raster(source, bands)
        self.images[opened.key] = opened
        return opened

    def image(self, key: str) -> OpenedRaster:
        try:
            return self.images[key]
        except KeyError:
            raise UnknownKey(f"no raster {key!r} is open here: open it first") from None

    # -- clicks and boxes -----------------------------------------------------------------------
    def click(
        self,
        key: str,
        points: Sequence[Sequence[float]] = (),
        box: Sequence[float] | None = None,
        previous: str | None = None,
    ) -> dict[str, Any]:
        """Points ``[x, y, 1|0]`` (1 adds, 0 removes) and/or a box ``[xmin, ymin, xmax, ymax]``
        in map coordinates -> up to 3 candidates, best first (the first with its polygon, the
        others by :meth:`candidate`), and the token that ``previous`` takes to refine this
        object. With ``previous``, ``points`` are all the object's points: those of the earlier
        result first, then the new ones."""
        opened = self.image(key)
        points = tuple(_point(p) for p in points)
        box = None if box is None else _box(box)
        if not points and box is None:
            raise InvalidInput("a click needs a point or a box")
        obj = self._continued(previous, key, points) if previous else None
        if obj is None:
            obj = self._start(opened, points, box)
            new_points, new_box = points, box
        else:
            new_points = points[len(obj.points) :]
            new_box = box if box != obj.box else None
            obj.session.resume(obj.state)
        window = _window_info(obj.grid, obj.tile)
        inverse = ~window.transform
        invalid = obj.invalid
        frame = None
        if new_box is not None:
            c0, r0 = inverse * (new_box[0], new_box[3])
            c1, r1 = inverse * (new_box[2], new_box[1])
            frame = obj.session.add_box([c0, r0, c1, r1])
        for x, y, label in new_points:
            col, row = inverse * (x, y)
            where = f"({x:.2f}, {y:.2f})"
            if not (0 <= col < window.cols and 0 <= row < window.rows):
                raise OutOfRange(
                    f"the point {where} lies outside the window of this object's first click: "
                    "start a new object there (reset), or click nearer"
                )
            if invalid is not None and invalid[int(row), int(col)]:
                raise InvalidInput(
                    f"the point {where} lies on fill (no data in the raster there): click on "
                    "the image"
                )
            frame = obj.session.add_point([col, row], positive=bool(label))
        obj = dataclasses.replace(
            obj,
            points=obj.points + new_points,
            box=box or obj.box,
            state=obj.session.prompts,
            frame=frame,
        )
        token = f"{key}:{next(self._tokens)}"
        self._objects[token] = obj
        while len(self._objects) > KEPT_RESULTS:  # the oldest results can no longer be refined
            del self._objects[next(iter(self._objects))]
        return {
            "candidates": _candidates(frame, window),
            "token": token,
            "window": _bounds(window),
        }

    def candidate(self, token: str, index: int) -> dict[str, Any]:
        """The polygon of the candidate listed with ``index`` by the click that gave ``token``:
        ``{"index", "score", "wkt", "area_m2"}``."""
        obj = self._objects.get(token)
        if obj is None or obj.frame is None:
            raise UnknownKey(
                f"{token!r} is no result here (the engine restarted, or it is older than the "
                f"last {KEPT_RESULTS} results): click again"
            )
        if not isinstance(index, int) or not 0 <= index < min(len(obj.frame), MAX_CANDIDATES):
            raise OutOfRange(
                f"candidate {index!r} of {token!r}: it has "
                f"{min(len(obj.frame), MAX_CANDIDATES)} (0 is the best)"
            )
        row = _polygon_row(obj.frame, index, _window_info(obj.grid, obj.tile))
        return {"index": index, **_polygon(row)}

    def forget(self) -> None:
        """Drop the objects (their tokens); the features stay in the client's cache."""
        self._objects.clear()

    def _continued(self, token: str, key: str, points: tuple) -> _Object | None:
        obj = self._objects.get(token)
        if obj is None or obj.image != key:
            raise UnknownKey(
                f"previous {token!r} is no result of this raster here (the engine restarted?): "
                "click again without it"
            )
        if points[: len(obj.points)] != obj.points:
            raise InvalidInput(
                "points must start with the points of the previous result (the object's "
                "points so far, then the new ones)"
            )
        return obj

    def _start(self, opened: OpenedRaster, points: tuple, box: tuple | None) -> _Object:
        from napari_sam3.scene.run import read_tile

        info, size = opened.info, int(self.client.image_size)
        gsd, grid = None, info
        if box is not None:
            c0, r0 = ~info.transform * (box[0], box[3])
            c1, r1 = ~info.transform * (box[2], box[1])
            side = max(abs(c1 - c0), abs(r1 - r0))
            metres = pixel_metres(info)
            if side > LARGE_BOX * size and math.isfinite(metres):
                gsd = metres * math.ceil(side / (LARGE_BOX * size))
                grid = raster_info(opened.source, gsd=gsd)
            anchor = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
        else:
            anchor = points[0][:2]
        col, row = ~grid.transform * anchor
        if not (0 <= col < grid.cols and 0 <= row < grid.rows):
            what = "box" if box is not None else "point"
            bounds = opened.describe()["bounds"]
            raise OutOfRange(
                f"the {what} at ({anchor[0]:.2f}, {anchor[1]:.2f}) lies outside the raster, "
                f"which covers {', '.join(f'{v:.2f}' for v in bounds)} in its CRS: click on it"
            )
        r0, c0 = click_window(col, row, grid.cols, grid.rows, size)
        tile = Tile(-1, r0, c0, min(size, grid.rows - r0), min(size, grid.cols - c0))
        where = (opened.key, gsd, tile.bounds)
        if where not in self._windows:  # read, stretched and hashed once per window
            self._windows[where] = read_tile(
                self.client, opened.source, tile, opened.bands, opened.view, gsd
            )[:2]
            while len(self._windows) > KEPT_WINDOWS:
                del self._windows[next(iter(self._windows))]
        prepared, invalid = self._windows[where]
        if prepared is None:
            raise InvalidInput(
                "the click's window holds only fill (no data in the raster there): click on "
                "the image"
            )
        session = self.client.interactive(prepared)
        return _Object(opened.key, grid, gsd, tile, session, invalid, (), None, session.prompts)

    # -- keywords and exemplars over an extent --------------------------------------------------
    def segment(
        self,
        key: str,
        keywords: Sequence[str] | None = None,
        exemplars: Sequence[Sequence[float]] | None = None,
        extent: Sequence[float] | None = None,
        gsd: float | None = None,
        score_thr: float | None = None,
        dedup: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Keywords and/or exemplar boxes ``[xmin, ymin, xmax, ymax, 1|0]`` over ``extent``
        (None: the whole raster) at ``gsd`` metres per pixel (None: native) -> the library's
        detection table as rows with WKT polygons (those that touch the extent)."""
        from napari_sam3.prompts.query import Query
        from napari_sam3.scene.aoi import AoiError, Bbox, aoi_window
        from napari_sam3.scene.driver import segment_with_provenance
        from napari_sam3.scene.output import scene_geodataframe
        from napari_sam3.scene.settings import SceneSettings

        opened = self.image(key)
        words = tuple(check_keyword(w) for w in keywords or ())
        epsg = opened.info.crs.to_epsg()
        crs = f"EPSG:{epsg}" if epsg else opened.info.crs.to_wkt()
        aoi = None
        if extent is not None:
            extent = _box(extent)
            bounds = _lonlat_turned(extent, opened.info)
            try:
                aoi = None if bounds is None else Bbox(*bounds, crs=crs)
                if aoi is not None:
                    aoi_window(aoi, opened.info)
            except AoiError as error:
                raise OutOfRange(str(error)) from None
        settings = SceneSettings(bands=opened.bands, gsd=gsd, aoi=aoi)
        thresholds = {
            k: v for k, v in (("score_thr", score_thr), ("dedup", dedup)) if v is not None
        }
        query = Query(keywords=words, exemplars=_exemplar_layer(exemplars, crs), **thresholds)
        df = segment_with_provenance(
            self.client, opened.source, query, settings, progress=progress or False
        )
        gdf = scene_geodataframe(df)
        if extent is not None and len(gdf):
            from shapely.geometry import box as shapely_box

            gdf = gdf[gdf.intersects(shapely_box(*extent))].reset_index(drop=True)
        features = []
        for row in gdf.itertuples(index=False):
            record = row._asdict()
            geometry = record.pop("geometry")
            features.append({"wkt": geometry.wkt, **{k: _plain(v) for k, v in record.items()}})
        return {"features": features, "count": len(features)}


def _lonlat_turned(extent: tuple, info: RasterInfo) -> tuple[float, float, float, float] | None:
    """A map extent as the library's bbox takes it: on a raster in degrees, its lon/lat range
    (a raster written in 0..360 has map extents past 180), or None where it spans half the
    globe or more (the whole raster, then: a bbox that wide reads as two numbers swapped)."""
    from napari_sam3.scene.aoi import lonlat_range

    if not info.crs.is_geographic:
        return extent
    if extent[2] - extent[0] >= 180.0:
        return None
    return lonlat_range(*extent)


def _exemplar_layer(boxes: Sequence[Sequence[float]] | None, crs: str) -> Any:
    if not boxes:
        return None
    import geopandas as gpd
    from shapely.geometry import box as shapely_box

    rows = []
    for item in boxes:
        if len(item) != 5 or item[4] not in (0, 1):
            raise InvalidInput(
                f"an exemplar is [xmin, ymin, xmax, ymax, 1|0] (1 positive, 0 negative), got "
                f"{list(item)!r}"
            )
        rows.append((shapely_box(*_box(item[:4])), int(item[4])))
    return gpd.GeoDataFrame({"label": [r[1] for r in rows]}, geometry=[r[0] for r in rows], crs=crs)


def _point(value: Sequence[float]) -> tuple[float, float, int]:
    if len(value) != 3 or value[2] not in (0, 1):
        raise InvalidInput(f"a point is [x, y, 1|0] (1 adds, 0 removes), got {value!r}")
    x, y = float(value[0]), float(value[1])
    if not (math.isfinite(x) and math.isfinite(y)):
        raise InvalidInput(f"a point needs finite coordinates, got {value!r}")
    return x, y, int(value[2])


def _box(value: Sequence[float]) -> tuple[float, float, float, float]:
    box = tuple(float(v) for v in value)
    if len(box) != 4 or not all(math.isfinite(v) for v in box):
        raise InvalidInput(f"a box is [xmin, ymin, xmax, ymax] in map units, got {value!r}")
    if box[2] <= box[0] or box[3] <= box[1]:
        raise InvalidInput(f"box {list(box)} has xmax <= xmin or ymax <= ymin")
    return box  # type: ignore[return-value]


def _window_info(grid: RasterInfo, tile: Tile) -> RasterInfo:
    return dataclasses.replace(
        grid,
        shape=(grid.count, tile.height, tile.width),
        transform=grid.transform * Affine.translation(tile.col, tile.row),
    )


def _bounds(info: RasterInfo) -> list[float]:
    west, north = info.transform * (0, 0)
    east, south = info.transform * (info.cols, info.rows)
    return [min(west, east), min(north, south), max(west, east), max(north, south)]


def _candidates(frame: Any, window: RasterInfo) -> list[dict[str, Any]]:
    """The result's candidates, best first, empty ones left out: each its ``index`` in the
    result and ``score``, the first with its polygon (``wkt``, ``area_m2``) in the raster's CRS.
    The others' polygons wait for :meth:`Canvas.candidate`: most clicks show the best alone,
    and three polygons cost three times one (0.27 s a click at full size on random weights)."""
    listed: list[dict[str, Any]] = []
    for index in range(min(len(frame), MAX_CANDIDATES)):
        entry = {"index": index, "score": float(frame["iou"].iloc[index])}
        if listed:  # the others: whether they hold a pixel; their polygons wait
            _, _, pixels = as_mask(frame["mask"].iloc[index]).crop()
            if pixels.any():
                listed.append(entry)
            continue
        row = _polygon_row(frame, index, window)
        if not row.geometry.is_empty:
            listed.append(_polygon(row) | entry)
    return listed


def _polygon_row(frame: Any, index: int, window: RasterInfo) -> Any:
    from napari_sam3.gis.vector import to_geodataframe

    return to_geodataframe(frame.iloc[[index]], window).iloc[0]


def _polygon(row: Any) -> dict[str, Any]:
    return {"score": float(row.iou), "wkt": row.geometry.wkt, "area_m2": float(row.area_m2)}


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value

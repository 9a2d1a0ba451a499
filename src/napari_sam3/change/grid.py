"""Every date on one grid: the first scene's (at ``gsd`` when asked), limited to where all dates
were seen.

The first date is read as a scene run reads it. Each later date is read through GDAL's warper
onto exactly that grid (a warped VRT in a temporary folder: windowed reads, nothing resampled
ahead), so both dates are cut into the same tiles with the same seams and the model sees their
objects at the same scale. Pixels outside a later date's own extent are invalid there (its
nodata value, or an alpha band added by the warp).

:func:`fill_region` is where a date has no valid pixel (nodata, GDAL's mask, inferred fill) in the
common footprint, as polygons in the grid's CRS: objects touching it are ``unknown``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import numpy as np
import shapely
from rasterio.crs import CRS
from rasterio.enums import ColorInterp, Resampling
from rasterio.transform import Affine, array_bounds

from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.raster import (
    RasterInfo,
    open_dataset,
    pixel_metres,
    raster_info,
    read_raster,
)
from napari_sam3.imagery.remote import file_name, is_remote
from napari_sam3.scene.aoi import AoiError, Bbox, aoi_window
from napari_sam3.scene.view import VIEW_SIZE, as_read, scene_view

__all__ = ["CommonGrid", "common_grid", "fill_region", "warp_onto"]


@dataclass(frozen=True)
class CommonGrid:
    """The grid every date is read on, and where all of them were seen."""

    # the first date's grid (its gsd grid when one was asked), cut to the footprint's bounds
    info: RasterInfo
    footprint: Any  # shapely geometry in info.crs: every date's extent, and the AOI

    @property
    def crs(self) -> CRS:
        return self.info.crs

    @property
    def pixel(self) -> float:
        """Metres across a grid pixel (NaN where the CRS is not projected)."""
        return pixel_metres(self.info)


def common_grid(
    sources: Sequence[Any], names: Sequence[str], gsd: float | None, aoi: Any = None
) -> CommonGrid:
    """The first source's grid (``gsd``: its ground grid) over the footprint every source
    covers, limited to ``aoi``. Refused when a source has no CRS, cannot be placed in the first's
    CRS, or when the sources (and the AOI) share no ground."""
    infos = [raster_info(s) for s in sources]
    for info, name in zip(infos, names, strict=True):
        if info.crs is None:
            raise InvalidInput(
                f"{name} has no CRS, so it cannot be placed beside the other dates; give "
                "georeferenced rasters (gdal_translate -a_srs EPSG:XXXX, or gdalwarp)"
            )
    grid = raster_info(sources[0], gsd=gsd) if gsd is not None else infos[0]
    footprint = _extent(infos[0], grid.crs, names[0])
    for info, name in zip(infos[1:], names[1:], strict=True):
        here = _extent(info, grid.crs, name)
        both = footprint.intersection(here)
        if both.is_empty or both.area <= 0:
            raise InvalidInput(
                f"{name} does not overlap {names[0]}: {name} covers {_text(here.bounds)} and "
                f"{names[0]} {_text(footprint.bounds)} in {grid.crs.to_string()}; give scenes "
                "of one place"
            )
        footprint = both
    if aoi is not None:
        try:
            window = aoi_window(aoi, grid)
        except AoiError as error:
            raise InvalidInput(str(error)) from None
        footprint = footprint.intersection(_window_box(grid, window))
        if footprint.is_empty or footprint.area <= 0:
            raise InvalidInput(
                "the area of interest lies outside the ground every date covers; move --bbox "
                "onto the scenes' common footprint"
            )
    r0, c0, r1, c1 = aoi_window(Bbox(*footprint.bounds, crs=grid.crs.to_wkt()), grid)
    cut = dataclasses.replace(
        grid,
        shape=(grid.count, r1 - r0, c1 - c0),
        transform=grid.transform * Affine.translation(c0, r0),
    )
    return CommonGrid(cut, footprint.intersection(_window_box(grid, (r0, c0, r1, c1))))


def warp_onto(source: Any, grid: CommonGrid, folder: Path, stem: str) -> Path:
    """A warped VRT of ``source`` (a raster, a URL, or single-band files to stack) on
    ``grid``'s pixels, written in ``folder``: read as any raster, with the source's band names.
    Outside the source's extent the pixels are invalid (its nodata value, else an alpha band).
    A source already on the grid's pixels is copied exactly (nearest neighbour)."""
    import rasterio
    import rasterio.shutil
    from rasterio.vrt import WarpedVRT

    info = raster_info(source)
    path = _stacked(info, folder, stem) if isinstance(info.path, tuple) else info.path
    target = grid.info
    out = folder / f"{stem}.vrt"
    with open_dataset(path) as ds:
        alpha = [i + 1 for i, c in enumerate(ds.colorinterp) if c == ColorInterp.alpha]
        options: dict[str, Any] = {}
        if alpha:
            options["src_alpha"] = alpha[0]
        elif ds.nodata is None:
            options["add_alpha"] = True
        with WarpedVRT(
            ds,
            crs=target.crs,
            transform=target.transform,
            width=target.cols,
            height=target.rows,
            resampling=_resampling(info, target),
            **options,
        ) as vrt:
            rasterio.shutil.copy(vrt, out, driver="VRT")
    with rasterio.open(out, "r+") as ds:
        for i, name in enumerate(info.band_names, start=1):
            ds.set_band_description(i, name)
    return out


def fill_region(source: Any, grid: CommonGrid, name: str, *, bands: Any = None, nodata: Any = None):
    """Where ``source`` (on ``grid``, as :func:`warp_onto` writes it) has no valid pixel within
    the footprint, as one geometry in the grid's CRS (empty when every pixel is valid), from a
    decimated read (cells at most the grid / VIEW_SIZE across, so a little generous). Refused
    when no pixel is valid."""
    from rasterio.features import shapes

    from napari_sam3.imagery.stretch import select_channels

    info = raster_info(source)
    try:
        view = scene_view(source, info, bands, nodata, warn=False)
    except InvalidInput:
        raise InvalidInput(
            f"{name} has no valid pixel where the dates overlap (all nodata, masked or fill): "
            "nothing to compare; choose another date, or another --nodata"
        ) from None
    raster = read_raster(source, bands=bands, max_size=VIEW_SIZE)
    channels = select_channels(raster, as_read(bands, raster.shape[0]), view.tile_nodata)
    if channels.invalid is None or not channels.invalid.any():
        return shapely.Polygon()
    invalid = channels.invalid.astype(np.uint8)
    parts = [
        shapely.geometry.shape(geom)
        for geom, _ in shapes(invalid, mask=invalid.astype(bool), transform=raster.transform)
    ]
    cell = math.hypot(raster.transform.a, raster.transform.d) / 2
    # a decimated cell may hide a few invalid pixels: half a cell wider on every side
    region = shapely.union_all(parts).buffer(cell, join_style="mitre")
    return region.intersection(grid.footprint)


# ----------------------------------------------------------------------------- internals


def _extent(info: RasterInfo, crs: CRS, name: str):
    """``info``'s extent as a polygon in ``crs`` (edges densified); refused where no usable
    transformation places it there."""
    from rasterio.warp import transform_geom

    west, south, east, north = array_bounds(info.rows, info.cols, info.transform)
    ring = shapely.segmentize(
        shapely.box(west, south, east, north), max(east - west, north - south) / 64
    )
    if info.crs == crs:
        return ring
    try:
        moved = shapely.geometry.shape(
            transform_geom(info.crs, crs, shapely.geometry.mapping(ring))
        )
    except Exception as error:  # GDAL's and PROJ's many failures, said once
        raise InvalidInput(_unplaced(name, info.crs, crs, _first_line(error))) from None
    coords = shapely.get_coordinates(moved)
    if not len(coords) or not np.isfinite(coords).all():
        raise InvalidInput(_unplaced(name, info.crs, crs, "points that are not finite"))
    return shapely.make_valid(moved)


def _first_line(error: Exception) -> str:
    text = str(error).split(" from '")[0].strip()  # PROJ appends both CRSs as JSON
    return f"an error ({text[:200]})"


def _unplaced(name: str, src: CRS, dst: CRS, why: str) -> str:
    return (
        f"{name} cannot be placed in {dst.to_string()}: reprojecting it from {src.to_string()} "
        f"gives {why} (no usable transformation between the CRSs, or the scene lies outside "
        "where one is defined); reproject it to the first date's CRS first (gdalwarp -t_srs)"
    )


def _window_box(info: RasterInfo, window: tuple[int, int, int, int]):
    r0, c0, r1, c1 = window
    t = info.transform
    x0, y0 = t * (c0, r0)
    x1, y1 = t * (c1, r1)
    return shapely.box(min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))


def _resampling(source: RasterInfo, target: RasterInfo) -> Resampling:
    """Average where the target's pixels are coarser than the source's, else bilinear (as
    ``read_raster`` resamples to a ground grid)."""
    from rasterio.warp import transform_bounds

    a, t = source.transform, target.transform
    if source.crs == target.crs and a.b == a.d == t.b == t.d == 0:
        steps = ((t.c - a.c) / a.a, (t.f - a.f) / a.e, t.a / a.a, t.e / a.e)
        if all(abs(v - round(v)) < 1e-6 for v in steps[:2]) and steps[2:] == (1.0, 1.0):
            return Resampling.nearest  # the same pixels: copied as they are
    west, south, east, north = array_bounds(source.rows, source.cols, source.transform)
    w, s, e, n = transform_bounds(source.crs, target.crs, west, south, east, north)
    across = (e - w) / source.cols
    return Resampling.average if abs(target.transform.a) > 1.5 * across else Resampling.bilinear


def _stacked(info: RasterInfo, folder: Path, stem: str) -> Path:
    """Single-band files as one VRT of their bands, in order (what ``read_raster`` stacks)."""
    t: Affine = info.transform
    dtype = {
        "uint8": "Byte", "uint16": "UInt16", "int16": "Int16", "uint32": "UInt32",
        "int32": "Int32", "float32": "Float32", "float64": "Float64", "int8": "Int8",
    }[np.dtype(info.dtype).name]  # fmt: skip
    nodata = "" if info.nodata is None else f"<NoDataValue>{info.nodata!r}</NoDataValue>"
    bands = []
    for i, (p, name) in enumerate(zip(info.path, info.band_names, strict=True), start=1):
        src = os.fspath(p)
        src = "/vsicurl/" + src if is_remote(src) and not src.startswith("/vsicurl/") else src
        bands.append(
            f'<VRTRasterBand dataType="{dtype}" band="{i}"><Description>{escape(name)}'
            f'</Description>{nodata}<SimpleSource><SourceFilename relativeToVRT="0">'
            f"{escape(src)}</SourceFilename><SourceBand>1</SourceBand></SimpleSource>"
            "</VRTRasterBand>"
        )
    xml = (
        f'<VRTDataset rasterXSize="{info.cols}" rasterYSize="{info.rows}">'
        f"<SRS>{escape(info.crs.to_wkt())}</SRS>"
        f"<GeoTransform>{t.c!r}, {t.a!r}, {t.b!r}, {t.f!r}, {t.d!r}, {t.e!r}</GeoTransform>"
        + "".join(bands)
        + "</VRTDataset>"
    )
    out = folder / f"{stem}.stack.vrt"
    out.write_text(xml, encoding="utf-8")
    return out


def _text(bounds) -> str:
    return ",".join(f"{v:.6g}" for v in bounds)


def scene_name(source: Any) -> str:
    """How a date is named by default: its file name (the first band's, for a stack)."""
    if isinstance(source, list | tuple):
        return "+".join(file_name(p) for p in source)
    return file_name(getattr(source, "get_self_href", lambda: source)() or "item")

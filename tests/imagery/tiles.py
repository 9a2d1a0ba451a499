"""XYZ tiles in EPSG:3857 rendered from the shipped Sentinel-2 scene, for a real tile server.

:func:`render_tiles` warps the scene's true-colour bands once onto one zoom level's Web Mercator
grid (bilinear; the 12-bit values scaled to 8 bits), cuts the mosaic into 256 px PNG tiles
``z/x/y.png`` (lossless, so a tile's pixels are exactly the mosaic's) and returns the mosaic
with its transform: what a local GeoTIFF of the same pixels is made from.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.errors import NotGeoreferencedWarning
from rasterio.transform import Affine
from rasterio.warp import Resampling, reproject, transform_bounds

TILE = 256
ORIGIN = 20037508.342789244  # half the Web Mercator world's width, metres


def resolution(zoom: int) -> float:
    """Metres of EPSG:3857 per pixel at ``zoom``."""
    return 2 * ORIGIN / (TILE * 2**zoom)


@dataclass(frozen=True)
class Mosaic:
    """The tiles rendered: their pixels (4, rows, cols: RGBA), grid and tile numbers."""

    data: np.ndarray
    transform: Affine
    zoom: int
    x0: int  # tile column of the mosaic's left edge
    y0: int  # tile row of its top edge

    def at(self, col: int, row: int) -> Affine:
        """The transform of the mosaic's pixel (col, row) as the corner: composed from the
        world's origin in one step, as GDAL's WMS driver and the basemap VRT compose it, so
        the floats are the same."""
        res = resolution(self.zoom)
        world = Affine(res, 0, -ORIGIN, 0, -res, ORIGIN)
        return world * Affine.translation(self.x0 * TILE + col, self.y0 * TILE + row)

    def write(self, path: Path, window: tuple[int, int, int, int] | None = None) -> Path:
        """A GeoTIFF of the mosaic (or its ``window`` r0, c0, r1, c1) in EPSG:3857."""
        r0, c0, r1, c1 = window or (0, 0, self.data.shape[1], self.data.shape[2])
        data = self.data[:, r0:r1, c0:c1]
        profile = {
            "driver": "GTiff",
            "count": data.shape[0],
            "height": data.shape[1],
            "width": data.shape[2],
            "dtype": "uint8",
            "crs": "EPSG:3857",
            "transform": self.at(c0, r0),
            "photometric": "RGB",
        }
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(data)
            dst.colorinterp = [
                rasterio.enums.ColorInterp.red,
                rasterio.enums.ColorInterp.green,
                rasterio.enums.ColorInterp.blue,
                rasterio.enums.ColorInterp.alpha,
            ]
        return path


def render_tiles(rgb_paths: list[Path], folder: Path, zoom: int) -> Mosaic:
    """Tiles ``folder/zoom/x/y.png`` of the scene at ``zoom``, and their mosaic."""
    with rasterio.open(rgb_paths[0]) as first:
        crs, transform, bounds = first.crs, first.transform, first.bounds
    bands = []
    for path in rgb_paths:
        with rasterio.open(path) as band:
            bands.append(band.read(1))
    bands = np.stack(bands)
    west, south, east, north = transform_bounds(crs, "EPSG:3857", *bounds)
    res = resolution(zoom)
    x0, x1 = math.floor((west + ORIGIN) / res / TILE), math.ceil((east + ORIGIN) / res / TILE)
    y0, y1 = math.floor((ORIGIN - north) / res / TILE), math.ceil((ORIGIN - south) / res / TILE)
    # composed as GDAL's WMS driver and the basemap VRT compose it, so the floats are the same
    world = Affine(res, 0, -ORIGIN, 0, -res, ORIGIN)
    grid = world * Affine.translation(x0 * TILE, y0 * TILE)
    rows, cols = (y1 - y0) * TILE, (x1 - x0) * TILE
    warped = np.zeros((3, rows, cols), dtype=np.float32)
    reproject(
        bands.astype(np.float32),
        warped,
        src_transform=transform,
        src_crs=crs,
        dst_transform=grid,
        dst_crs="EPSG:3857",
        src_nodata=0,
        dst_nodata=0,
        resampling=Resampling.bilinear,
    )
    inside = warped.max(axis=0) > 0
    rgba = np.zeros((4, rows, cols), dtype=np.uint8)
    rgba[:3] = np.clip(warped / 3000 * 255, 1, 255).astype(np.uint8) * inside
    rgba[3] = inside * 255
    for ty in range(y1 - y0):
        for tx in range(x1 - x0):
            tile = rgba[:, ty * TILE : (ty + 1) * TILE, tx * TILE : (tx + 1) * TILE]
            target = folder / str(zoom) / str(x0 + tx) / f"{y0 + ty}.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotGeoreferencedWarning)
                with rasterio.open(
                    target, "w", driver="PNG", count=4, height=TILE, width=TILE, dtype="uint8"
                ) as dst:
                    dst.write(tile)
    return Mosaic(rgba, grid, zoom, x0, y0)

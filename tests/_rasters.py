"""Test rasters written one way: a bands-first array as a GeoTIFF, and the two dates of one place
that the change tests compare."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import rasterio
from rasterio.transform import Affine, from_origin

# a 10 m grid in UTM 33N, where rasters made from arrays are placed by default
TEN_METRES = from_origin(300000, 5800000, 10, 10)
# rows, cols of the later date painted as fill (nodata 0)
PAINTED = np.s_[100:160, 120:220]


def write_geotiff(path: Path, data: np.ndarray, transform=None, crs=None, **profile) -> Path:
    """`data` (bands, rows, cols) at `path`; without a CRS the file has no georeferencing.
    Other creation options (nodata, dtype, compress, ...) pass through."""
    options = {
        "driver": "GTiff",
        "count": data.shape[0],
        "height": data.shape[1],
        "width": data.shape[2],
        "dtype": data.dtype,
        **profile,
    }
    if crs is not None:
        options.update(crs=crs, transform=transform)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
        with rasterio.open(path, "w", **options) as ds:
            ds.write(data.astype(options["dtype"], copy=False))
    return Path(path)


def later_date(folder: Path, raster, name: str = "after.tif") -> tuple[Path, Affine]:
    """`raster`'s pixels cut by 20 rows and 30 columns, on a grid whose origin moved with them,
    with the block PAINTED as nodata: the same ground, another grid, fill in one place.
    Returns the file and its transform."""
    cut = np.ascontiguousarray(raster.data[:, 20:, 30:])
    cut[(slice(None), *PAINTED)] = 0
    shifted = raster.transform * Affine.translation(30, 20)
    return write_geotiff(folder / name, cut, shifted, raster.crs, nodata=0), shifted

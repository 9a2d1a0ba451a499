"""Whether a raster's georeferencing places it on the globe: its corners taken to longitude and
latitude in its CRS's own datum, and compared with the area the CRS is defined for.

A geotransform from another CRS, or in the wrong units, still gives polygons; they land nowhere
(coordinates that are not finite once reprojected) or far from the imagery. Such a raster is
refused (nowhere) or warned about (far outside the CRS's area of use) before a run.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyproj

from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.raster import RasterInfo, _describe_path

__all__ = ["check_placement", "corner_lonlat", "crosses_antimeridian"]


def crosses_antimeridian(west: float, east: float, what: str = "bbox") -> bool:
    """Whether a longitude range whose west is above its east crosses the antimeridian (the
    reading of GeoJSON's and STAC's bboxes, RFC 7946 section 5.2): only when it spans less than
    half the globe; a wider one is far more likely two numbers swapped, and is refused rather
    than read as nearly the whole world."""
    if west <= east:
        return False
    span = east + 360.0 - west
    if span >= 180.0:
        raise InvalidInput(
            f"{what}: west {west:g} is above east {east:g}. Read as crossing the antimeridian "
            f"that spans {span:g} degrees of longitude, more than half the globe; if the two "
            f"were swapped write {east:g} first. An area across the antimeridian is written "
            "west,south,east,north with west above east, e.g. 179.5,-17.2,-179.6,-16.1 (Fiji)"
        )
    return True


def corner_lonlat(info: RasterInfo) -> tuple[np.ndarray, np.ndarray]:
    """Longitudes and latitudes of the raster's four corners (and centre), in its CRS's datum."""
    crs = _crs(info)
    cols, rows = info.cols, info.rows
    points = [(0, 0), (cols, 0), (0, rows), (cols, rows), (cols / 2, rows / 2)]
    xs, ys = zip(*(info.transform @ p for p in points), strict=True)
    geodetic = crs.geodetic_crs or pyproj.CRS.from_epsg(4326)
    to_lonlat = pyproj.Transformer.from_crs(crs, geodetic, always_xy=True)
    with np.errstate(all="ignore"):
        lon, lat = to_lonlat.transform(np.asarray(xs, float), np.asarray(ys, float))
        # a projection's inverse may saturate (Web Mercator far beyond the world gives the
        # pole): a corner is on the globe only where its longitude and latitude map back to it
        back_x, back_y = to_lonlat.transform(lon, lat, direction="INVERSE")
    lon, lat = np.asarray(lon, float), np.asarray(lat, float)
    tolerance = 1e-6 * np.maximum(1.0, np.abs(xs) + np.abs(ys)) + 1e-3
    off = np.hypot(np.asarray(back_x) - xs, np.asarray(back_y) - ys) > tolerance
    lon[off], lat[off] = np.nan, np.nan
    return lon, lat


def check_placement(info: RasterInfo, warn: bool = True) -> str | None:
    """Refuses a raster whose corners have no longitude and latitude in its CRS; says (a
    UserWarning, unless ``warn`` is False, and returns the line) when they lie outside the CRS's
    area of use by more than its own extent."""
    if info.crs is None:
        return None
    name = _describe_path(info.path)
    crs_name = info.crs.to_string()
    lon, lat = corner_lonlat(info)
    if not (np.isfinite(lon).all() and np.isfinite(lat).all()) or (np.abs(lat) > 90).any():
        raise InvalidInput(
            f"{name}: its corners cannot be placed on the globe in {crs_name} (its geotransform "
            f"gives {info.transform.c:.6g}, {info.transform.f:.6g} for the top-left corner): the "
            "georeferencing is not in this CRS; check it with gdalinfo, and assign the right CRS "
            "with gdal_edit.py -a_srs"
        )
    area = _crs(info).area_of_use
    if area is None or area.east < area.west:  # none known, or across the antimeridian
        return None
    # the area widened by its own extent each way (in longitude, by as many kilometres as at
    # the equator: degrees widen towards the poles); longitudes compared around the globe
    width = max(1.0, area.east - area.west)
    height = max(1.0, area.north - area.south)
    centre = (area.west + area.east) / 2
    margin = width / np.maximum(np.cos(np.radians(lat)), 0.05)
    across = np.abs((lon - centre + 180.0) % 360.0 - 180.0) <= width / 2 + margin
    along = (lat >= area.south - height) & (lat <= area.north + height)
    if (across & along).all():
        return None
    line = (
        f"{name} lies at longitude {lon[-1]:.2f}, latitude {lat[-1]:.2f}, far outside the area "
        f"{crs_name} is defined for ({area.west:g}..{area.east:g} E, {area.south:g}..{area.north:g}"
        " N): its polygons will be placed there; check the georeferencing (gdalinfo)"
    )
    if warn:
        warnings.warn(line, UserWarning, stacklevel=3)
    return line


def _crs(info: RasterInfo) -> pyproj.CRS:
    # by its EPSG code where it has one: a CRS rebuilt from WKT alone has no area of use
    return pyproj.CRS.from_user_input(info.crs.to_string())

"""Areas across the antimeridian (Fiji, Chukotka, the Aleutians): a longitude/latitude bbox with
west above east is read as crossing (GeoJSON's and STAC's convention), on rasters in the UTM
zones either side, in degrees (-180..180 or 0..360) and in vector files; a west above east that
spans half the globe or more is refused as two numbers swapped."""

from __future__ import annotations

import math

import geopandas as gpd
import numpy as np
import pyproj
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from rasterio.crs import CRS
from rasterio.transform import from_origin

from napari_sam3.imagery.raster import RasterInfo
from napari_sam3.scene.aoi import AoiError, Bbox, aoi_window, lonlat_bounds, parse_bbox


def _info(crs: str, transform, rows: int, cols: int) -> RasterInfo:
    return RasterInfo("scene.tif", (3, rows, cols), np.dtype("uint8"), CRS.from_user_input(crs),
                      transform, None, ("1", "2", "3"))  # fmt: skip


def _reference_window(box, info: RasterInfo):
    """The window holding the bbox on a projected raster, worked out independently of the
    library: its edges sampled on the unwrapped longitudes west..east+360 and projected point by
    point with pyproj."""
    west, south, east, north = box
    lons = np.linspace(west, east + 360.0, 181)
    lats = np.linspace(south, north, 181)
    lon = np.concatenate([lons, lons, np.full_like(lats, west), np.full_like(lats, east + 360)])
    lat = np.concatenate([np.full_like(lons, south), np.full_like(lons, north), lats, lats])
    to = pyproj.Transformer.from_crs(4326, info.crs.to_wkt(), always_xy=True)
    xs, ys = to.transform(((lon + 180.0) % 360.0) - 180.0, lat)
    cols, rows = ~info.transform * (np.asarray(xs), np.asarray(ys))
    r0, c0 = max(math.floor(rows.min() + 1e-9), 0), max(math.floor(cols.min() + 1e-9), 0)
    r1 = min(math.ceil(rows.max() - 1e-9), info.rows)
    c1 = min(math.ceil(cols.max() - 1e-9), info.cols)
    return r0, c0, r1, c1


# UTM 60 South and 1 South around Fiji (the antimeridian at 17 S), 100 m pixels, 2000 x 2000
ZONES = {
    "EPSG:32760": from_origin(700_000, 8_250_000, 100, 100),  # 60S: its east part is past 180
    "EPSG:32701": from_origin(100_000, 8_250_000, 100, 100),  # 1S: its west part is before 180
}
crossing = st.tuples(
    st.floats(178.9, 179.95),
    st.floats(-17.4, -16.6),
    st.floats(-179.95, -179.1),
    st.floats(0.05, 0.6),
).map(lambda t: (t[0], t[1], t[2], t[1] + t[3]))


@settings(max_examples=40, deadline=None)
@given(box=crossing, crs=st.sampled_from(sorted(ZONES)))
def test_a_bbox_across_the_antimeridian_selects_its_ground_on_utm_rasters(box, crs):
    info = _info(crs, ZONES[crs], 2000, 2000)
    got = aoi_window(Bbox(*box), info)
    want = _reference_window(box, info)
    assert all(abs(g - w) <= 1 for g, w in zip(got, want, strict=True)), (got, want)


def test_on_a_raster_in_degrees_the_side_it_covers_is_taken():
    box = (179.5, -17.2, -179.6, -16.1)
    west_side = _info("EPSG:4326", from_origin(179.0, -16.0, 0.001, 0.001), 1500, 1000)
    assert aoi_window(Bbox(*box), west_side) == (100, 500, 1200, 1000)  # 179.5..180
    east_side = _info("EPSG:4326", from_origin(-180.0, -16.0, 0.001, 0.001), 1500, 1000)
    assert aoi_window(Bbox(*box), east_side) == (100, 0, 1200, 400)  # -180..-179.6
    continued = _info("EPSG:4326", from_origin(179.0, -16.0, 0.001, 0.001), 1500, 2000)
    assert aoi_window(Bbox(*box), continued) == (100, 500, 1200, 1400)  # 179.5..180.4


def test_a_vector_file_across_the_antimeridian_gives_the_stac_bbox(tmp_path):
    # the Fiji box drawn in UTM 60S, in degrees as two parts either side (GeoJSON's way), and
    # with longitudes continued past 180
    utm = gpd.GeoDataFrame(
        geometry=[shapely.box(*(x for x in (780_000, 8_100_000, 900_000, 8_200_000)))],
        crs="EPSG:32760",
    )
    utm.to_file(tmp_path / "utm.gpkg")
    west, south, east, north = lonlat_bounds(str(tmp_path / "utm.gpkg"))
    assert 179 < west < 180 and -180 < east < -179 and south < north
    parts = [shapely.box(179.5, -17.2, 180, -16.1), shapely.box(-180, -17.2, -179.6, -16.1)]
    continued = [shapely.box(179.5, -17.2, 180.4, -16.1)]
    for name, shapes in {"parts": parts, "continued": continued}.items():
        gpd.GeoDataFrame(geometry=shapes, crs=4326).to_file(tmp_path / f"{name}.gpkg")
        fiji = lonlat_bounds(str(tmp_path / f"{name}.gpkg"))
        assert fiji == pytest.approx((179.5, -17.2, -179.6, -16.1)), name
        # and on a raster of UTM 60S the vector file selects what the same bbox does
        info = _info("EPSG:32760", ZONES["EPSG:32760"], 2000, 2000)
        assert aoi_window(str(tmp_path / f"{name}.gpkg"), info) == aoi_window(Bbox(*fiji), info)
    # parts on both sides of the globe's other seam stay one ordinary range
    apart = [shapely.box(10, 0, 11, 1), shapely.box(170, 0, 171, 1)]
    gpd.GeoDataFrame(geometry=apart, crs=4326).to_file(tmp_path / "apart.gpkg")
    assert lonlat_bounds(str(tmp_path / "apart.gpkg")) == pytest.approx((10, 0, 171, 1))


@settings(max_examples=60, deadline=None)
@given(west=st.floats(-180, 180), east=st.floats(-180, 180))
def test_west_above_east_is_a_crossing_only_when_it_spans_under_half_the_globe(west, east):
    text = f"{west!r},10,{east!r},11"
    if west < east:
        assert parse_bbox(text).bounds == (west, 10.0, east, 11.0)
    elif west == east or east + 360 - west >= 180:
        with pytest.raises(AoiError, match="swapped|below maxx"):
            parse_bbox(text)
    else:
        assert parse_bbox(text).bounds == (west, 10.0, east, 11.0)


def test_a_projected_bbox_still_needs_minx_below_maxx():
    with pytest.raises(AoiError, match="minx must be below maxx"):
        parse_bbox("900000,8100000,780000,8200000,EPSG:32760")


@settings(max_examples=60, deadline=None)
@given(
    origin=st.floats(90.0, 260.0),
    start=st.floats(0.0, 0.8),
    width=st.floats(0.05, 0.2),
)
def test_on_a_raster_written_past_180_a_lonlat_bbox_selects_its_ground(origin, start, width):
    """A raster in degrees written 0..360 (its west edge anywhere from 90 to 260, 100 degrees
    wide): a GeoJSON bbox of part of it, its longitudes in -180..180 (west above east where it
    crosses 180), selects the pixels of the same ground as its unwrapped longitudes."""
    info = _info("EPSG:4326", from_origin(origin, 10.0, 0.01, 0.01), 500, 10_000)
    west = origin + 100.0 * start
    east = west + 100.0 * width
    geojson = [((v + 180.0) % 360.0) - 180.0 for v in (west, east)]
    if geojson[1] == -180.0:
        geojson[1] = 180.0
    got = aoi_window(Bbox(geojson[0], 6.0, geojson[1], 8.0), info)
    columns = [(v - origin) / 0.01 for v in (west, east)]
    want = (200, math.floor(columns[0] + 1e-9), 400, math.ceil(columns[1] - 1e-9))
    assert all(abs(g - w) <= 1 for g, w in zip(got, want, strict=True)), (got, want, geojson)

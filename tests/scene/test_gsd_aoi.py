"""--gsd and --bbox on local rasters: the resampled grid, polygons in place, the tiles of an AOI.

The placement test uses the conftest's StubClient (objects = distinct bright values), because the
tiny model's random masks move with every change of the pixels and so cannot say whether a polygon
found at another resolution is in the right place; the resampling and the georeferencing are the
project's own code in both runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from rasterio.transform import array_bounds

from napari_sam3.imagery.raster import ground_grid, raster_info, read_raster
from napari_sam3.scene import scene_geodataframe, segment_scene, write_scene
from napari_sam3.scene.aoi import AoiError, Bbox, aoi_window, tiles_touching

OBJECTS = {100: (20, 60, 40, 100), 150: (100, 110, 10, 30), 200: (120, 180, 200, 280)}


@pytest.fixture
def objects_tif(geotiff, tmp_path):
    """200 x 300 px at 10 m: three flat rectangles (rows r0:r1, cols c0:c1) of distinct values."""
    data = np.zeros((3, 200, 300), np.uint8)
    for value, (r0, r1, c0, c1) in OBJECTS.items():
        data[:, r0:r1, c0:c1] = value
    return geotiff(tmp_path / "objects.tif", data)


def _largest_by_value(gdf):
    """The biggest polygon of each object value (the stub scores an object value / 255)."""
    best = gdf.sort_values("area_px").groupby("score").tail(1)
    return {round(float(s) * 255): g for s, g in zip(best["score"], best.geometry, strict=True)}


@pytest.mark.parametrize("gsd", [20.0, 5.0])
def test_gsd_at_twice_and_half_the_pixel_gives_polygons_in_the_native_places(
    make_stub, objects_tif, gsd
):
    # objects on 0 (image here, not fill): every tile reaches the stub
    native = scene_geodataframe(
        segment_scene(make_stub(), objects_tif, "x", progress=False, nodata="none")
    )
    stub = make_stub()
    df = segment_scene(stub, objects_tif, "x", progress=False, gsd=gsd, nodata="none")
    info = raster_info(objects_tif)
    factor = 10 / gsd
    assert df.attrs["scene"]["shape"] == (200 * factor, 300 * factor)
    # the tile grid (64 px tiles, 8 px overlap) is laid in the resampled grid's pixels
    tiles = df.attrs["tiles"]
    assert {t.height for t in tiles} == {64} and max(
        t.row + t.height for t in tiles
    ) == 200 * factor
    assert len(tiles) == len(stub.tiles) >= 6
    assert max(max(shape) for shape in stub.tiles) == 64
    resampled = scene_geodataframe(df)
    assert resampled.crs == native.crs and set(resampled["gsd"]) == {gsd}
    got, want = _largest_by_value(resampled), _largest_by_value(native)
    # upsampling blends the edges into other values (small rims): the objects are the flat values
    assert set(want) == set(OBJECTS) and set(OBJECTS) <= set(got)
    for value, geometry in want.items():
        # within one native pixel (10 m) of the native polygon, which is the rectangle exactly
        np.testing.assert_allclose(got[value].bounds, geometry.bounds, atol=10)
        assert got[value].centroid.distance(geometry.centroid) < 5
        r0, r1, c0, c1 = OBJECTS[value]
        x0, y0 = info.transform * (c0, r0)
        x1, y1 = info.transform * (c1, r1)
        np.testing.assert_allclose(geometry.bounds, (x0, y1, x1, y0))


def test_ground_grid_is_exact_and_reads_the_area_average(s2_rgb_paths):
    info = raster_info(s2_rgb_paths[0])
    transform, rows, cols, down, across = ground_grid(info, 20)
    assert (rows, cols, down, across) == (384, 768, 2.0, 2.0)
    assert transform.c == info.transform.c and transform.f == info.transform.f
    assert transform.a == 20 and transform.e == -20
    assert array_bounds(rows, cols, transform) == array_bounds(info.rows, info.cols, info.transform)
    coarse = read_raster(s2_rgb_paths[0], window=np.s_[10:20, 30:50], gsd=20)
    fine = read_raster(s2_rgb_paths[0], window=np.s_[20:40, 60:100]).data.astype(np.float64)
    expected = fine.reshape(1, 10, 2, 20, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(coarse.data, expected, atol=1)  # GDAL rounds the averages
    assert coarse.transform == transform @ __import__("rasterio").Affine.translation(30, 10)
    up = read_raster(s2_rgb_paths[0], window=np.s_[0:8, 0:8], gsd=5)
    assert up.shape == (1, 8, 8) and up.transform.a == 5
    assert raster_info(s2_rgb_paths[0], gsd=15).shape == (1, 512, 1024)


@pytest.mark.parametrize(
    ("gsd", "message"),
    [(0, "positive"), (-3, "positive"), (float("nan"), "positive"), ("10", "number of metres"),
     (0.1, "more than 16 times"), (1e6, "coarser than")],
)  # fmt: skip
def test_a_bad_gsd_is_refused(s2_rgb_paths, gsd, message):
    with pytest.raises(ValueError, match=message):
        raster_info(s2_rgb_paths[0], gsd=gsd)


def test_gsd_needs_metres(geotiff, tmp_path):
    data = np.zeros((1, 10, 10), np.uint8)
    with pytest.raises(ValueError, match="no CRS"):
        raster_info(geotiff(tmp_path / "plain.tif", data, crs=None), gsd=10)
    with pytest.raises(ValueError, match="degrees"):
        raster_info(geotiff(tmp_path / "lonlat.tif", data, crs="EPSG:4326"), gsd=10)


def test_the_label_raster_of_a_gsd_run_lies_on_the_gsd_grid(make_stub, objects_tif, tmp_path):
    import rasterio

    df = segment_scene(make_stub(), objects_tif, "x", progress=False, gsd=20)
    out = write_scene(df, tmp_path / "labels.tif", objects_tif)
    with rasterio.open(out) as ds:
        assert (ds.height, ds.width) == (100, 150) and ds.transform.a == 20
    assert write_scene(df, tmp_path / "polys.gpkg", objects_tif).exists()


def test_an_aoi_runs_the_tiles_that_touch_it_and_finds_what_is_there(make_stub, objects_tif):
    info = raster_info(objects_tif)
    r0, r1, c0, c1 = OBJECTS[200]
    x0, y0 = info.transform * (c0, r0)
    x1, y1 = info.transform * (c1, r1)
    stub = make_stub()
    df = segment_scene(
        stub, objects_tif, "x", progress=False, aoi=Bbox(x0, y1, x1, y0, "EPSG:32633")
    )
    assert df.attrs["aoi"] == (r0, c0, r1, c1)
    run = [df.attrs["tiles"][i] for i in df.attrs["tiles_run"]]
    assert run == tiles_touching(df.attrs["tiles"], (r0, c0, r1, c1))
    assert len(stub.tiles) == len(run) < len(df.attrs["tiles"])
    found = {round(s * 255) for s in df["score"]}
    assert 200 in found and 100 not in found  # the object far from the AOI was never seen
    # the same box in lon/lat selects at least those tiles
    from rasterio.warp import transform_bounds

    lonlat = transform_bounds("EPSG:32633", "EPSG:4326", x0, y1, x1, y0)
    r0b, c0b, r1b, c1b = aoi_window(lonlat, info)
    assert r0b <= r0 and c0b <= c0 and r1b >= r1 and c1b >= c1


def test_aoi_errors(objects_tif, geotiff, tmp_path):
    info = raster_info(objects_tif)
    with pytest.raises(AoiError, match="outside the scene"):
        aoi_window(Bbox(0, 0, 1, 1), info)
    with pytest.raises(AoiError, match="swapped"):  # in degrees, west above east: see below
        aoi_window((5, 5, 1, 6), info)
    with pytest.raises(AoiError, match="minx must be below maxx"):
        aoi_window((5, 5, 1, 6, "EPSG:32633"), info)
    with pytest.raises(AoiError, match="four numbers"):
        aoi_window(("a", 1, 2, 3), info)
    with pytest.raises(AoiError, match="no such file"):
        aoi_window(str(tmp_path / "town.gpkg"), info)
    plain = raster_info(geotiff(tmp_path / "plain.tif", np.zeros((1, 8, 8), np.uint8), crs=None))
    with pytest.raises(AoiError, match="no CRS"):
        aoi_window(Bbox(0, 0, 1, 1), plain)


def test_an_aoi_from_a_vector_file(objects_tif, tmp_path):
    import geopandas as gpd
    from shapely.geometry import box

    info = raster_info(objects_tif)
    x0, y0 = info.transform * (200, 120)
    x1, y1 = info.transform * (280, 180)
    path = tmp_path / "town.gpkg"
    gpd.GeoDataFrame(geometry=[box(x0, y1, x1, y0)], crs="EPSG:32633").to_file(path)
    assert aoi_window(str(path), info) == (120, 200, 180, 280)

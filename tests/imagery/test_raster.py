"""read_raster / raster_info on the real Sentinel-2 scene and on files written here."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from PIL import Image
from rasterio.crs import CRS
from rasterio.transform import from_origin
from rasterio.windows import Window

from napari_sam3.imagery.raster import Raster, raster_info, read_raster


def _rasterio_band(path, index=1):
    with rasterio.open(path) as ds:
        return ds.read(index)


# ----------------------------------------------------------------------------- Sentinel-2 (JP2)


def test_stack_of_sentinel2_bands(s2_rgb_paths):
    r = read_raster(s2_rgb_paths)
    assert isinstance(r, Raster)
    assert r.data.shape == (3, 768, 1536)
    assert r.data.dtype == np.uint16
    assert r.band_names == ("B04", "B03", "B02")
    assert r.crs == CRS.from_epsg(32633)
    assert r.transform == rasterio.Affine(10.0, 0.0, 330000.0, 0.0, -10.0, 5822040.0)
    assert r.path == tuple(s2_rgb_paths)
    for i, path in enumerate(s2_rgb_paths):
        np.testing.assert_array_equal(r.data[i], _rasterio_band(path))
    # The three bands are really different files, not one read three times.
    assert not np.array_equal(r.data[0], r.data[2])


def test_single_band_names_come_from_sentinel2_file_names(s2_bands):
    assert read_raster(s2_bands["B8A"]).band_names == ("B8A",)
    assert raster_info(s2_bands["B11"]).band_names == ("B11",)


def test_windowed_reads_equal_slices_of_full_read(s2_rgb_paths, s2_rgb_raster):
    full = s2_rgb_raster
    by_slices = read_raster(s2_rgb_paths, window=np.s_[100:300, 250:700])
    by_window = read_raster(s2_rgb_paths, window=Window(250, 100, 450, 200))
    np.testing.assert_array_equal(by_slices.data, full.data[:, 100:300, 250:700])
    np.testing.assert_array_equal(by_window.data, by_slices.data)
    # numpy semantics for slices: open ends and stops past the edge.
    tail = read_raster(s2_rgb_paths[0], window=np.s_[700:, 1500:9999])
    np.testing.assert_array_equal(tail.data, full.data[:1, 700:, 1500:])


def test_window_transform_and_crs(s2_rgb_paths):
    r = read_raster(s2_rgb_paths, window=np.s_[100:300, 250:700])
    assert r.crs == CRS.from_epsg(32633)
    # 10 m pixels: the window's corner is 250 columns east and 100 rows south of the scene's.
    assert r.transform.c == pytest.approx(330000.0 + 250 * 10)
    assert r.transform.f == pytest.approx(5822040.0 - 100 * 10)
    assert (r.transform.a, r.transform.e) == (10.0, -10.0)


def test_bands_by_name_and_index_from_a_stack(s2_bands):
    paths = [s2_bands["B02"], s2_bands["B03"], s2_bands["B04"], s2_bands["B08"]]
    by_name = read_raster(paths, bands=["B08", "B04"])
    by_index = read_raster(paths, bands=[4, 3])
    assert by_name.band_names == ("B08", "B04")
    np.testing.assert_array_equal(by_name.data, by_index.data)
    np.testing.assert_array_equal(by_name.data[0], _rasterio_band(s2_bands["B08"]))


def test_decimated_read(s2_rgb_paths, s2_rgb_raster):
    full = s2_rgb_raster
    small = read_raster(s2_rgb_paths, max_size=384)
    assert small.data.shape == (3, 192, 384)
    # Nearest neighbour: every value exists in the full band; same footprint on the ground.
    assert np.isin(small.data[0], full.data[0]).all()
    assert small.transform.a == pytest.approx(40.0)
    assert small.transform @ (384, 192) == pytest.approx(full.transform @ (1536, 768))
    # Already small enough: nothing changes.
    assert read_raster(s2_rgb_paths[0], max_size=4096).data.shape == (1, 768, 1536)


def test_raster_info_of_a_stack(s2_rgb_paths):
    info = raster_info(s2_rgb_paths)
    assert info.shape == (3, 768, 1536)
    assert (info.count, info.rows, info.cols) == (3, 768, 1536)
    assert info.dtype == np.uint16
    assert info.crs.to_epsg() == 32633
    assert info.band_names == ("B04", "B03", "B02")
    assert info.nodata is None


def test_stack_of_mismatched_grids_is_refused(s2_bands):
    with pytest.raises(ValueError, match=r"cannot stack .*B05.*shape 384x768 vs 768x1536"):
        read_raster([s2_bands["B04"], s2_bands["B05"]])


# ----------------------------------------------------------------------------- GeoTIFF, PNG, JPEG


@pytest.fixture
def geotiff(tmp_path):
    rng = np.random.default_rng(7)
    data = rng.integers(-2000, 6000, size=(4, 60, 90)).astype(np.int16)
    data[:, :5, :] = -9999
    path = tmp_path / "scene.tif"
    profile = dict(
        driver="GTiff",
        width=90,
        height=60,
        count=4,
        dtype="int16",
        crs="EPSG:3857",
        transform=from_origin(1000.0, 2000.0, 0.5, 0.5),
        nodata=-9999,
    )
    with rasterio.open(path, "w", **profile) as ds:
        ds.write(data)
        ds.descriptions = ("blue", "green", "red", "nir")
    return path, data


def test_geotiff_with_nodata_and_descriptions(geotiff):
    path, data = geotiff
    r = read_raster(path)
    np.testing.assert_array_equal(r.data, data)
    assert r.nodata == -9999
    assert r.band_names == ("blue", "green", "red", "nir")
    assert r.crs == CRS.from_epsg(3857)
    assert r.path == path
    sub = read_raster(path, bands=("red", "green", 1), window=np.s_[10:20, 30:50])
    np.testing.assert_array_equal(sub.data, data[[2, 1, 0], 10:20, 30:50])
    assert sub.transform @ (0, 0) == pytest.approx((1000.0 + 30 * 0.5, 2000.0 - 10 * 0.5))
    assert r.band_index("NIR") == 4


def test_unnamed_bands_get_generic_names(tmp_path):
    path = tmp_path / "plain.tif"
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=8,
        height=6,
        count=2,
        dtype="float32",
        crs="EPSG:4326",
        transform=from_origin(10, 50, 0.1, 0.1),
    ) as ds:
        ds.write(np.ones((2, 6, 8), np.float32))
    assert read_raster(path).band_names == ("band_1", "band_2")


def test_png_and_jpeg(tmp_path):
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, size=(40, 70, 4), dtype=np.uint8)
    Image.fromarray(rgba).save(tmp_path / "a.png")
    png = read_raster(tmp_path / "a.png")
    np.testing.assert_array_equal(png.data, np.moveaxis(rgba, -1, 0))
    assert png.crs is None

    smooth = np.zeros((48, 64, 3), np.uint8)
    smooth[..., 0] = np.linspace(0, 255, 64, dtype=np.uint8)
    smooth[..., 1] = 120
    Image.fromarray(smooth).save(tmp_path / "b.jpg", quality=95)
    jpg = read_raster(tmp_path / "b.jpg")
    assert jpg.data.shape == (3, 48, 64)
    assert np.abs(jpg.data.astype(int) - np.moveaxis(smooth, -1, 0)).max() <= 8


# ----------------------------------------------------------------------------- bad input


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no_such_scene.tif"):
        read_raster("no_such_scene.tif")


def test_text_file_named_tif(tmp_path):
    path = tmp_path / "notes.tif"
    path.write_text("this is not a raster\n")
    with pytest.raises(ValueError, match="cannot read .*notes.tif as a raster"):
        read_raster(path)
    with pytest.raises(ValueError, match="notes.tif"):
        raster_info(path)


def test_truncated_geotiff(tmp_path):
    path = tmp_path / "cut.tif"
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=300,
        height=200,
        count=1,
        dtype="uint16",
        crs="EPSG:32633",
        transform=from_origin(0, 0, 10, 10),
    ) as ds:
        ds.write(np.arange(60000, dtype=np.uint16).reshape(1, 200, 300))
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    with pytest.raises(ValueError, match="cut.tif"):
        read_raster(path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bands": [0]}, r"band 0 is out of range .* 1-based"),
        ({"bands": [5]}, r"band 5 is out of range .* 4 band"),
        ({"bands": ["swir"]}, r"no band named 'swir'.*blue"),
        ({"bands": []}, r"selects nothing"),
        ({"bands": [1.5]}, r"1-based index or a name"),
        ({"window": Window(80, 0, 20, 10)}, r"does not lie inside .*60 rows x 90 cols"),
        ({"window": Window(0.5, 0, 20, 10)}, r"fractional"),
        ({"window": np.s_[70:80, 0:10]}, r"selects no pixels"),
        ({"window": np.s_[0:10:2, 0:10]}, r"step 1"),
        ({"window": ((0, 0), (10, 10))}, r"rasterio Window or a \(row_slice, col_slice\)"),
        ({"max_size": 0}, r"max_size must be a positive"),
    ],
)
def test_bad_arguments(geotiff, kwargs, message):
    path, _ = geotiff
    with pytest.raises(ValueError, match=message):
        read_raster(path, **kwargs)


def test_bad_path_arguments():
    with pytest.raises(ValueError, match="empty list"):
        read_raster([])
    with pytest.raises(ValueError, match="file path"):
        read_raster(42)  # type: ignore[arg-type]

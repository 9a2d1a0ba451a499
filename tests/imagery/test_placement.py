"""A raster whose georeferencing does not place it on the globe is refused before a run; one
placed far outside its CRS's area of use is said to be. Real GeoTIFFs in each case."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import rasterio
from hypothesis import given, settings
from hypothesis import strategies as st
from rasterio.transform import from_origin

from napari_sam3.cli import main
from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.placement import check_placement
from napari_sam3.imagery.raster import raster_info


def _tif(path, crs, x0, y0, size=10.0):
    data = np.random.default_rng(0).integers(1, 255, (3, 40, 50), np.uint8)
    profile = dict(driver="GTiff", count=3, height=40, width=50, dtype="uint8")
    with rasterio.open(
        path, "w", crs=crs, transform=from_origin(x0, y0, size, size), **profile
    ) as ds:
        ds.write(data)
    return path


@pytest.mark.parametrize(
    ("crs", "x0", "y0", "size"),
    [
        ("EPSG:32633", 1e9, 1e9, 10.0),  # metres far beyond the projection
        ("EPSG:4326", 10.0, 120.0, 0.01),  # a latitude past the pole
        ("EPSG:3857", 1e12, 1e12, 10.0),
    ],
)
def test_a_raster_placed_nowhere_is_refused(tmp_path, crs, x0, y0, size):
    info = raster_info(_tif(tmp_path / "x.tif", crs, x0, y0, size))
    with pytest.raises(InvalidInput, match="cannot be placed on the globe .*gdal_edit.py -a_srs"):
        check_placement(info)


def test_a_raster_far_outside_its_crs_area_is_said(tmp_path):
    info = raster_info(_tif(tmp_path / "x.tif", "EPSG:32633", 3_500_000, 5_800_000))
    with pytest.warns(UserWarning, match="far outside the area EPSG:32633 is defined for"):
        check_placement(info)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 60),
    st.booleans(),
    st.floats(166_000, 834_000),
    st.floats(1_200_000, 9_300_000),  # within 80 S .. 84 N either way
)
def test_any_raster_inside_its_utm_zone_passes_in_silence(tmp_path_factory, zone, north, x, y):
    crs = f"EPSG:{32600 + zone if north else 32700 + zone}"
    path = _tif(tmp_path_factory.mktemp("utm") / "x.tif", crs, x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_placement(raster_info(path)) is None


def test_the_cli_refuses_it_before_the_run_and_writes_nothing(tmp_path, tiny_repository, capsys):
    raster = _tif(tmp_path / "nowhere.tif", "EPSG:32633", 1e9, 1e9)
    code = main(["segment", str(raster), "--models", str(tiny_repository), "--precision", "fp32",
                 "--prompt", "building", "--out", str(tmp_path / "out.geojson")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "cannot be placed on the globe" in err
    assert not (tmp_path / "out.geojson").exists()

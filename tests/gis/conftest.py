"""GIS fixtures: real Sentinel-2 pixels as GeoTIFFs (their own UTM 33N grid, and re-labelled onto
UTM 21N for the cross-CRS prompt checks), and one tiny-model scene result on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rasterio.transform import from_origin

from napari_sam3.imagery.raster import read_raster

from .._rasters import write_geotiff

UTM21 = "EPSG:32621"
# A 10 m grid in UTM 21N near 45.1 N, 57 W (zone 21's central meridian), so the lon/lat
# round trip is well conditioned.
UTM21_ORIGIN = (500000.0, 5000000.0)


@pytest.fixture(scope="session")
def s2_scene_tif(s2_rgb_paths, tmp_path_factory) -> Path:
    """A 240 x 300 true-colour window of the real scene, on its real grid (EPSG:32633)."""
    raster = read_raster(s2_rgb_paths, window=np.s_[200:440, 300:600])
    path = tmp_path_factory.mktemp("s2") / "s2_window.tif"
    return write_geotiff(path, raster.data, raster.transform, raster.crs)


@pytest.fixture(scope="session")
def utm21_tif(s2_rgb_paths, tmp_path_factory) -> Path:
    """The same kind of window, its pixels placed on a 10 m grid in EPSG:32621."""
    raster = read_raster(s2_rgb_paths, window=np.s_[200:440, 300:600])
    path = tmp_path_factory.mktemp("utm21") / "scene_utm21.tif"
    return write_geotiff(path, raster.data, from_origin(*UTM21_ORIGIN, 10, 10), UTM21)


@pytest.fixture(scope="session")
def scene_result(local_client, s2_scene_tif):
    """segment_scene on the real window, the tiny random-weight model, provenance added."""
    from napari_sam3.gis.vector import add_provenance
    from napari_sam3.scene import segment_scene

    df = segment_scene(
        local_client, s2_scene_tif, "building", score_thr=0.0, max_det=4, progress=False
    )
    assert len(df) > 3, "the random-weight model should find something at score_thr 0"
    return add_provenance(df, local_client.manifest)

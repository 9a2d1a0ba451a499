"""The napari vector reader: shapes in map units that map back to the exemplar pixel boxes."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pytest
import rasterio

from napari_sam3.plugin import vector_reader as napari_io
from napari_sam3.prompts import vector as vp

from .conftest import UTM21
from .test_vector_prompts import BOXES, _lonlat_polygon


@pytest.fixture
def gpkg(tmp_path):
    gdf = gpd.GeoDataFrame(
        {"label": [1, 0], "name": ["a", "b"]},
        geometry=[_lonlat_polygon(b) for b in BOXES],
        crs="EPSG:4326",
    )
    path = tmp_path / "footprints.gpkg"
    gdf.to_file(path, engine="pyogrio")
    return path


def test_shapes_in_map_units_map_to_the_exemplar_boxes(gpkg, utm21_tif):
    (layer,) = napari_io.vector_layers(gpkg, crs=UTM21)
    data, kwargs, kind = layer
    assert kind == "shapes" and kwargs["shape_type"] == ["polygon", "polygon"]
    assert kwargs["metadata"]["crs"] == "EPSG:32621"
    assert list(kwargs["features"]["label"]) == [1, 0]
    with rasterio.open(utm21_tif) as ds:
        inverse = ~ds.transform
    boxes = []
    for vertices in data:  # world (y, x) = (-northing, easting)
        cols, rows = inverse * (vertices[:, 1], -vertices[:, 0])
        boxes.append([cols.min(), rows.min(), cols.max(), rows.max()])
    np.testing.assert_allclose(boxes, BOXES, atol=1e-3)
    np.testing.assert_allclose(boxes, vp.exemplar_boxes(gpkg, utm21_tif)[0], atol=1e-4)


def test_reader_hook_and_bad_files(gpkg, tmp_path):
    assert napari_io.get_vector_reader(str(tmp_path / "x.tif")) is None
    reader = napari_io.get_vector_reader(str(gpkg))
    ((data, kwargs, kind),) = reader(str(gpkg))  # the hook's reader reads THIS file
    assert kind == "shapes" and list(kwargs["features"]["name"]) == ["a", "b"]
    assert kwargs["metadata"]["crs"] == "EPSG:4326"  # the file's own CRS by default
    lon_lat = gpd.read_file(gpkg).geometry.bounds.to_numpy()  # minx, miny, maxx, maxy
    # world (y, x) = (-latitude, longitude)
    bounds = [[v[:, 1].min(), -v[:, 0].max(), v[:, 1].max(), -v[:, 0].min()] for v in data]
    np.testing.assert_allclose(bounds, lon_lat, rtol=1e-12)
    bad = tmp_path / "bad.geojson"
    bad.write_text("{ not geojson")
    with pytest.raises(ValueError, match="bad.geojson"):
        napari_io.vector_layers(bad)


@pytest.mark.napari
def test_viewer_opens_a_gpkg_as_shapes(make_napari_viewer, gpkg):
    viewer = make_napari_viewer()
    layers = viewer.open(str(gpkg), plugin="napari-sam3")
    assert [type(layer).__name__ for layer in layers] == ["Shapes"]
    assert len(layers[0].data) == 2 and list(layers[0].features["name"]) == ["a", "b"]

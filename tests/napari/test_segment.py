"""The Segment widget on the embedded engine (tiny random-weight model), driven by clicks.

The random weights make the masks meaningless, so each test compares the widget's labels with
what the library returns for the same image and prompt: the widget must add nothing and lose
nothing between the layers and `Sam3Client.segment`.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari


def _dock(viewer, widget):
    viewer.window.add_dock_widget(widget, name=type(widget).__name__)
    return widget


def _expected(client, files, **kwargs):
    from napari_sam3.gis import masks_to_labels
    from napari_sam3.raster import read_raster

    raster = read_raster(files)
    frame = client.segment(raster, **kwargs)
    return frame, masks_to_labels(frame, raster.shape[1:])


def test_text_prompt_makes_a_labels_layer(s2_viewer, connected, s2_rgb_files, ui):
    from napari_sam3.widgets import SegmentWidget

    viewer = s2_viewer
    image = viewer.layers["T33UUU_20170216T102101 B03"]
    widget = _dock(viewer, SegmentWidget(viewer))
    widget.image.value = image  # any band of the stack: the model gets B04, B03, B02
    widget.prompt.value = "building"
    widget.score_thr.value = 0.0
    widget.max_det.value = 20
    before = len(viewer.layers)
    ui.run(widget, widget.run_button)

    assert len(viewer.layers) == before + 1
    layer = viewer.layers[-1]
    assert layer.name == "SAM3 building"
    assert layer.data.shape == (768, 1536) and layer.data.dtype == np.int32
    frame, labels = _expected(connected, s2_rgb_files, prompt="building", score_thr=0.0, max_det=20)
    assert len(frame) >= 1
    np.testing.assert_array_equal(layer.data, labels)
    features = layer.features
    assert list(features.columns) == ["index", "score", "keyword", "prompt_kind", "area", "source"]
    assert features["index"].tolist() == list(range(1, len(frame) + 1))
    np.testing.assert_allclose(features["score"], frame["score"], rtol=1e-6)
    assert set(features["keyword"]) == {"building"} and set(features["prompt_kind"]) == {"text"}
    # On the image's pixels, with its georeferencing.
    np.testing.assert_allclose(layer.scale, image.scale)
    np.testing.assert_allclose(layer.translate, image.translate)
    assert layer.metadata["crs"] == "EPSG:32633"
    assert layer.metadata["transform"] == image.metadata["transform"]
    assert layer.metadata["sam3"]["kind"] == "result"
    assert "object(s)" in widget.status.value


def test_exemplar_boxes_positive_and_negative_without_text(s2_viewer, connected, s2_rgb_files, ui):
    from napari_sam3.widgets import SegmentWidget

    viewer = s2_viewer
    widget = _dock(viewer, SegmentWidget(viewer))
    widget.image.value = viewer.layers["T33UUU_20170216T102101 B04"]
    ui.click(widget.new_exemplars)
    exemplars = viewer.layers["SAM3 exemplars"]
    assert widget.exemplars.value is exemplars
    exemplars.add_rectangles(np.array([[100.0, 200.0], [150.0, 260.0]]))
    widget.negative.value = True
    exemplars.add_rectangles(np.array([[400.0, 900.0], [440.0, 980.0]]))
    assert exemplars.features["positive"].tolist() == [True, False]
    widget.score_thr.value = 0.0
    ui.run(widget, widget.run_button)

    layer = viewer.layers[-1]
    assert layer.name == "SAM3 visual query"
    # napari puts pixel (r, c)'s centre at (r, c); the library's pixel edges are 0.5 away.
    boxes = [[200.5, 100.5, 260.5, 150.5], [900.5, 400.5, 980.5, 440.5]]
    frame, labels = _expected(
        connected, s2_rgb_files, exemplar_boxes=boxes, exemplar_labels=[1, 0], score_thr=0.0
    )
    assert len(frame) > 0, "score_thr=0 keeps the exemplars' candidates"
    np.testing.assert_array_equal(layer.data, labels)
    assert layer.features["prompt_kind"].tolist() == ["exemplar"] * len(frame)


def test_region_crops_and_places_the_result(s2_viewer, connected, s2_rgb_files, ui):
    from napari_sam3.raster import read_raster
    from napari_sam3.widgets import SegmentWidget

    viewer = s2_viewer
    image = viewer.layers["T33UUU_20170216T102101 B04"]
    # The region is drawn in world (map) coordinates on a layer of its own, scale 1.
    region = viewer.add_shapes(name="region", ndim=2)
    corner = np.array(image.data_to_world((200, 300)))
    far = np.array(image.data_to_world((455, 811)))
    region.add_rectangles(np.array([corner - 5.0, far + 5.0]))  # pixel edges: rows 200..455
    widget = _dock(viewer, SegmentWidget(viewer))
    widget.image.value = image
    widget.region.value = region
    widget.prompt.value = "field"
    widget.score_thr.value = 0.0
    ui.run(widget, widget.run_button)

    layer = viewer.layers[-1]
    assert layer.data.shape == (256, 512)
    np.testing.assert_allclose(layer.data_to_world((0, 0)), image.data_to_world((200, 300)))
    assert layer.metadata["sam3"]["offset"] == [200, 300]
    assert layer.metadata["transform"] == [10.0, 0.0, 333000.0, 0.0, -10.0, 5820040.0]
    from napari_sam3.gis import masks_to_labels

    crop = read_raster(s2_rgb_files, window=np.s_[200:456, 300:812])
    # The crop is shown with the whole scene's stretch; the model gets that same stretch.
    from napari_sam3.client import PreparedImage
    from napari_sam3.letterbox import Letterbox
    from napari_sam3.stretch import StretchStats, to_model_rgb

    stretch = [viewer.layers[n].metadata["sam3"]["stretch"] for n in _band_names(viewer)]
    stats = StretchStats(
        low=tuple(s["low"] for s in stretch),
        high=tuple(s["high"] for s in stretch),
        band_names=("B04", "B03", "B02"),
    )
    rgb = to_model_rgb(crop, stats=stats)
    box = Letterbox(rgb.shape[:2], connected.image_size)
    frame = connected.segment(
        PreparedImage(rgb, box, box.apply(rgb)), prompt="field", score_thr=0.0
    )
    np.testing.assert_array_equal(layer.data, masks_to_labels(frame, (256, 512)))


def _band_names(viewer):
    return [f"T33UUU_20170216T102101 {b}" for b in ("B04", "B03", "B02")]


def test_errors_are_notifications_not_tracebacks(s2_viewer, ui, sam3_client):
    from napari_sam3.widgets import SegmentWidget
    from napari_sam3.widgets._common import STATE

    viewer = s2_viewer
    widget = _dock(viewer, SegmentWidget(viewer))
    widget.prompt.value = "building"
    before = len(viewer.layers)
    ui.click(widget.run_button)  # not connected yet
    assert "Not connected" in widget.status.value
    note = ui.last_notification()
    assert "Not connected" in str(note.message) and note.severity == "error"
    assert not hasattr(note, "exception"), "an error notification, not a traceback"

    STATE.set_client(sam3_client)
    assert "RANDOM WEIGHTS" in widget.model.value
    widget.prompt.value = "   "
    ui.click(widget.run_button)
    assert "type a text prompt, or draw exemplar boxes" in widget.status.value
    assert len(viewer.layers) == before


def test_cancel_drops_the_result_and_frees_the_widget(s2_viewer, connected, ui, qtbot):
    from qtpy.QtCore import QThreadPool

    from napari_sam3.widgets import SegmentWidget

    viewer = s2_viewer
    widget = _dock(viewer, SegmentWidget(viewer))
    widget.prompt.value = "building"
    before = len(viewer.layers)
    ui.click(widget.run_button)
    assert widget.job.running
    assert not widget.progress.native.isHidden() and not widget.cancel_button.native.isHidden()
    assert not widget.run_button.enabled
    ui.click(widget.cancel_button)
    assert not widget.job.running and widget.run_button.enabled
    assert widget.progress.native.isHidden()
    assert "cancelled" in widget.status.value
    QThreadPool.globalInstance().waitForDone(120_000)
    qtbot.wait(50)
    assert len(viewer.layers) == before

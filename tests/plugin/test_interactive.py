"""The Interactive widget: clicks, a box and a seed mask refine one object; accept and undo."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari

STACK = "T33UUU_20170216T102101"


@pytest.fixture
def interactive(s2_viewer, connected, ui):
    from napari_sam3.plugin.widgets import InteractiveWidget

    viewer = s2_viewer
    widget = InteractiveWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Interactive")
    widget.image.value = viewer.layers[f"{STACK} B04"]
    ui.click(widget.prompt_layers_button)
    return widget


def test_clicks_give_three_candidates_and_accept_adds_a_label(
    interactive, connected, ui, s2_rgb_files
):
    from napari_sam3.imagery.raster import read_raster

    widget, viewer = interactive, interactive.viewer
    clicks = viewer.layers["SAM3 clicks"]
    assert widget.clicks.value is clicks and widget.box.value is viewer.layers["SAM3 box"]

    # A click before Start encodes the image first, then runs the click; the encoding is listed
    # in napari's activity dock.
    clicks.add(np.array([[300.0, 500.0]]))
    assert "SAM3: Encoding the image" in _activities()
    ui.wait(widget)
    assert widget.last_error is None, widget.status.value
    # The session is on the true-colour stack, as the library prepares it from the files.
    files = connected.prepare(read_raster(s2_rgb_files))
    np.testing.assert_array_equal(widget.session.prepared.rgb, files.rgb)
    np.testing.assert_array_equal(widget.session.prepared.images_u8, files.images_u8)
    labels = _choices(widget)
    assert len(labels) == 3 and all("IoU" in text for text in labels)
    assert "3 candidates" in widget.status.value

    # The same click through the library gives the same candidates.
    session = connected.interactive(widget.session.prepared)
    expected = session.add_point((500.5, 300.5), positive=True)
    np.testing.assert_allclose(widget.session.result["iou"], expected["iou"], rtol=1e-5)
    preview = viewer.layers["SAM3 candidate"]
    np.testing.assert_array_equal(preview.data > 0, np.asarray(expected["mask"].iloc[0]))

    # A negative click refines it; the preview shows the new best candidate, drawn once and in
    # place (a new array would make napari re-check every layer's extent).
    shown = preview.data
    drawn = []
    preview.events.set_data.connect(drawn.append)
    widget.negative.value = True
    clicks.add(np.array([[310.0, 520.0]]))
    assert widget.job.running and "SAM3: Adding a click" not in _activities(), "a click flashes"
    ui.wait(widget)
    preview.events.set_data.disconnect(drawn.append)
    assert clicks.features["positive"].tolist() == [True, False]
    expected = session.add_point((520.5, 310.5), positive=False)
    np.testing.assert_allclose(widget.session.result["iou"], expected["iou"], rtol=1e-5)
    assert viewer.layers["SAM3 candidate"] is preview and preview.data is shown
    np.testing.assert_array_equal(preview.data > 0, np.asarray(expected["mask"].iloc[0]))
    assert len(drawn) == 1, "the preview is drawn once a result"

    # Accept the second candidate into a new labels layer, as label 1.
    widget.candidate.value = 1
    chosen = np.asarray(expected["mask"].iloc[1])
    np.testing.assert_array_equal(preview.data > 0, chosen)
    ui.click(widget.accept_button)
    assert widget.last_error is None, widget.status.value
    objects = viewer.layers["SAM3 objects"]
    np.testing.assert_array_equal(objects.data == 1, chosen)
    assert objects.features["index"].tolist() == [1]
    assert objects.features["prompt_kind"].tolist() == ["interactive"]
    assert objects.metadata["crs"] == "EPSG:32633"
    assert len(clicks.data) == 0, "accept starts the next object"

    # Undo accept takes it back.
    ui.click(widget.undo_accept_button)
    assert not objects.data.any()
    assert len(objects.features) == 0


def _activities() -> list[str]:
    """What napari's activity dock lists now."""
    from napari.utils import progress

    return [str(p.desc) for p in progress._all_instances]


def _choices(widget) -> list[str]:
    """The candidate radio buttons as shown."""
    from qtpy.QtWidgets import QRadioButton

    return [b.text() for b in widget.candidate.native.findChildren(QRadioButton)]


def test_accept_never_overwrites_the_analysts_labels(interactive, ui):
    widget, viewer = interactive, interactive.viewer
    image = widget.image.value
    mine = np.zeros(image.data.shape, np.int32)
    mine[250:350, 450:550] = 7
    from napari_sam3.plugin.widgets._layers import placement

    own = viewer.add_labels(mine.copy(), name="my labels", **placement(image))
    widget.target.value = own
    viewer.layers["SAM3 box"].add_rectangles(np.array([[200.0, 400.0], [400.0, 600.0]]))
    ui.wait(widget)
    assert widget.last_error is None, widget.status.value
    candidate = widget.candidate_mask()
    ui.click(widget.accept_button)
    assert widget.last_error is None, widget.status.value
    data = own.data
    np.testing.assert_array_equal(data[mine == 7], 7)  # untouched
    np.testing.assert_array_equal(data == 8, candidate & (mine == 0))
    assert own.metadata["crs"] == "EPSG:32633", "the analyst's layer gets the georeferencing"
    ui.click(widget.undo_accept_button)
    np.testing.assert_array_equal(own.data, mine)


def test_seed_mask_undo_and_reset(interactive, connected, ui):
    widget, viewer = interactive, interactive.viewer
    ui.click(widget.start_button)
    ui.wait(widget)
    seed = viewer.layers["SAM3 seed"]
    painted = np.zeros(seed.data.shape, np.int32)
    painted[100:160, 700:780] = 1
    seed.data = painted
    ui.click(widget.seed_button)
    ui.wait(widget)
    assert widget.last_error is None, widget.status.value
    session = connected.interactive(widget.session.prepared)
    expected = session.add_mask(painted > 0)
    np.testing.assert_allclose(widget.session.result["iou"], expected["iou"], rtol=1e-5)

    clicks = viewer.layers["SAM3 clicks"]
    clicks.add(np.array([[130.0, 740.0]]))
    ui.wait(widget)
    ui.click(widget.undo_button)
    assert len(clicks.data) == 0, "undo removes the click it undid"
    np.testing.assert_allclose(widget.session.result["iou"], expected["iou"], rtol=1e-5)

    ui.click(widget.reset_button)
    assert widget.session.result is None
    assert not seed.data.any()
    assert not viewer.layers["SAM3 candidate"].data.any()
    assert widget.candidate_mask() is None


def test_keys_act_on_the_open_widget_only(interactive, ui, qtbot):
    """The napari actions (tests/plugin/test_laptop_screen.py presses them all in the panel) act
    on the viewer's open Interactive widget; once it is closed, on nothing."""
    from qtpy.QtCore import Qt

    widget, viewer = interactive, interactive.viewer
    assert "Shift-N" in widget.shortcuts.tooltip and "Shift-C" in widget.accept_button.tooltip
    canvas = viewer.window._qt_viewer.canvas.native
    qtbot.keyClick(canvas, Qt.Key.Key_N, Qt.KeyboardModifier.ShiftModifier)
    assert widget.negative.value is True
    assert viewer.layers["SAM3 clicks"].feature_defaults["positive"][0] == False  # noqa: E712
    widget.close()
    qtbot.keyClick(canvas, Qt.Key.Key_G, Qt.KeyboardModifier.ShiftModifier)
    assert widget.negative.value is True, "a closed widget is left alone"
    assert "open the SAM3 panel" in str(ui.last_notification().message)


# SAM2's quality filters (the widget's) pass nothing of the random-weight model: opened up, its
# 4 x 4 grid gives several overlapping masks on the Sentinel-2 scene (the default 16 x 16, more).
OPEN_FILTERS = {"pred_iou_thresh": 0.0, "stability_score_thresh": 0.0, "box_nms_thresh": 1.0}


def test_everything(interactive, connected, ui, monkeypatch):
    from napari_sam3.client.interactive import InteractiveSession
    from napari_sam3.gis.vector import masks_to_labels

    everything = InteractiveSession.everything

    def opened(self, points_per_side=16, **options):
        return everything(self, points_per_side, **{**OPEN_FILTERS, **options})

    monkeypatch.setattr(InteractiveSession, "everything", opened)
    widget, viewer = interactive, interactive.viewer
    widget.points_per_side.value = 4
    ui.click(widget.everything_button)
    ui.wait(widget)
    assert widget.last_error is None, widget.status.value
    layer = viewer.layers[-1]
    assert layer.name == "SAM3 everything"
    expected = everything(
        connected.interactive(widget.session.prepared), points_per_side=4, **OPEN_FILTERS
    )
    assert len(expected) > 1, "the test needs several masks to compare"
    np.testing.assert_array_equal(layer.data, masks_to_labels(expected, (768, 1536)))
    assert layer.features["index"].tolist() == list(range(1, len(expected) + 1))
    np.testing.assert_allclose(layer.features["score"], expected["iou"], rtol=1e-6)
    assert set(layer.features["prompt_kind"]) == {"everything"}
    assert f"{len(expected)} object(s)" in widget.status.value

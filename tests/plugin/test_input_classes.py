"""Issue 42, item 1, in napari: the keywords the library refuses (one control character, a
zero-width space, a lone surrogate) are refused by the Text tab with the library's message, before
any model work; a raster placed outside its CRS's area reaches the analyst from the Scene tab as
the library's refusal or warning."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from napari_sam3.core.errors import InvalidInput
from napari_sam3.prompts.keywords import check_keyword

pytestmark = pytest.mark.napari

STACK = "T33UUU_20170216T102101"
BAD_KEYWORDS = ["\x01", "\u200b", "road\ud800"]


def _refusal(word: str) -> str:
    with pytest.raises(InvalidInput) as caught:
        check_keyword(word)
    return str(caught.value)


@pytest.mark.parametrize("word", BAD_KEYWORDS, ids=["control", "zero-width", "surrogate"])
def test_the_text_tab_refuses_a_keyword_the_library_refuses(s2_viewer, connected, ui, word):
    _dock, panel = s2_viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    panel.image.value = s2_viewer.layers[f"{STACK} B04"]
    text = panel.mode("Text & exemplars")
    before = len(s2_viewer.layers)
    calls = []
    text.job.start = lambda *a, **k: calls.append(a)  # any model work starts a job
    text.keywords.value = word
    ui.click(text.run_button)
    message = _refusal(word)
    assert isinstance(text.last_error, InvalidInput)
    assert text.status.value == f"Segment failed: {message}"
    note = ui.last_notification()
    assert message in str(note.message) and note.severity == "error"
    assert not hasattr(note, "exception"), "an error notification, not a traceback"
    assert calls == [] and len(s2_viewer.layers) == before


def _tif(path, crs, x0, y0):
    data = np.random.default_rng(0).integers(1, 255, (3, 200, 200), np.uint8)
    profile = dict(driver="GTiff", count=3, height=200, width=200, dtype="uint8")
    with rasterio.open(path, "w", crs=crs, transform=from_origin(x0, y0, 10, 10), **profile) as ds:
        ds.write(data)
    return path


def _scene(viewer, path):
    from napari_sam3.plugin.widgets import SceneWidget

    widget = SceneWidget(viewer)
    viewer.window.add_dock_widget(widget, name="SceneWidget")
    widget.file.value = path
    widget.prompt.value = "building"
    widget.tile_size.value = 160
    return widget


def test_the_scene_tab_refuses_a_raster_placed_nowhere(make_napari_viewer, connected, ui, tmp_path):
    from napari_sam3.imagery.placement import check_placement
    from napari_sam3.imagery.raster import raster_info

    viewer = make_napari_viewer()
    path = _tif(tmp_path / "nowhere.tif", "EPSG:32633", 1e9, 1e9)
    with pytest.raises(InvalidInput) as caught:
        check_placement(raster_info(path))
    widget = _scene(viewer, path)
    ui.click(widget.run_button)
    ui.wait(widget)
    assert isinstance(widget.last_error, InvalidInput)
    assert widget.status.value.endswith(str(caught.value)), widget.status.value
    note = ui.last_notification()
    assert str(caught.value) in str(note.message) and note.severity == "error"
    assert len(viewer.layers) == 0


def test_the_scene_tab_says_a_raster_lies_far_outside_its_crs(
    make_napari_viewer, connected, ui, tmp_path
):
    from napari_sam3.imagery.placement import check_placement
    from napari_sam3.imagery.raster import raster_info

    viewer = make_napari_viewer()
    path = _tif(tmp_path / "far.tif", "EPSG:32633", 3_500_000, 5_800_000)
    line = check_placement(raster_info(path), warn=False)
    assert line
    widget = _scene(viewer, path)
    ui.run(widget, widget.run_button)
    assert line in widget.status.value, widget.status.value
    assert any(line in str(n.message) for n in _notifications()), "a warning notification"
    assert len(viewer.layers) == 1  # it ran: a warning, not a refusal


def _notifications():
    from napari.utils.notifications import notification_manager

    return notification_manager.records

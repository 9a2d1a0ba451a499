"""Full-window screenshots of each dock widget at work, saved to docs/images/ for the README.

Each widget is opened the way napari opens it from the Plugins menu (the npe2 manifest, with
napari's public-only viewer proxy), used on the Sentinel-2 scene, and the saved window image is
checked to contain the widget: the widget's own rendering must match the screenshot where the
widget sits. The model is the tiny random-weight one, so its masks are noise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.napari

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
STACK = "T33UUU_20170216T102101"
SIZE = (1400, 900)


@pytest.fixture
def window(make_napari_viewer, s2_rgb_files):
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(*SIZE)
    viewer.open(s2_rgb_files, stack=True, plugin="napari-sam3")
    return viewer


def _open(viewer, name: str):
    _dock, widget = viewer.window.add_plugin_dock_widget("napari-sam3", name)
    return widget


def _shoot(viewer, widget, qtbot, file_name: str) -> np.ndarray:
    """Save the whole window; assert the widget is in the picture; return the picture."""
    from PIL import Image
    from qtpy.QtCore import QPoint

    qtbot.wait(300)  # let docking, layout and the canvas settle
    shot = np.asarray(viewer.screenshot(canvas_only=False, flash=False))
    IMAGES.mkdir(parents=True, exist_ok=True)
    Image.fromarray(shot).save(IMAGES / file_name)

    window = widget.native.window()
    ratio = shot.shape[1] / window.width()
    grab = widget.native.grab().toImage()
    ptr = grab.constBits()
    ptr.setsize(grab.sizeInBytes())
    own = np.frombuffer(ptr, np.uint8).reshape(grab.height(), grab.bytesPerLine() // 4, 4)
    own = own[:, : grab.width(), [2, 1, 0]]  # BGRA -> RGB
    origin = widget.native.mapTo(window, QPoint(0, 0))
    top, left = round(origin.y() * ratio), round(origin.x() * ratio)
    height, width = own.shape[:2]
    assert height > 50 and width > 100, "the widget is not laid out"
    assert top + height <= shot.shape[0] and left + width <= shot.shape[1]
    region = shot[top : top + height, left : left + width, :3].astype(int)
    same = np.mean(np.abs(region - own.astype(int)) <= 8)
    assert same > 0.97, f"the widget is not in the screenshot ({same:.1%} of its pixels match)"
    return shot


def test_segment_screenshot(window, connected, ui, qtbot):
    widget = _open(window, "Segment")
    widget.image.value = window.layers[f"{STACK} B04"]
    widget.prompt.value = "building"
    widget.score_thr.value = 0.0
    ui.run(widget, widget.run_button)
    assert window.layers[-1].name == "SAM3 building"
    _shoot(window, widget, qtbot, "napari_segment.png")


def test_connection_screenshot(window, sam3_repository, ui, qtbot, tmp_path, monkeypatch):
    # A relative folder name, as an analyst types it (and no machine path in the picture).
    (tmp_path / "model_repository").symlink_to(sam3_repository, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    widget = _open(window, "Connection")
    widget.repository.value = "model_repository"
    ui.run(widget, widget.connect_button)
    _shoot(window, widget, qtbot, "napari_connection.png")


def test_multi_keyword_screenshot(window, connected, ui, qtbot):
    widget = _open(window, "Multi-keyword")
    widget.keywords.value = "building\nroad\nfield"
    widget.score_thr.value = 0.0
    ui.run(widget, widget.run_button)
    _shoot(window, widget, qtbot, "napari_multi_keyword.png")


def test_concepts_screenshot(window, connected, ui, qtbot):
    widget = _open(window, "Concepts")
    ui.click(widget.new_exemplars)
    widget.exemplars.value.add_rectangles(np.array([[100.0, 200.0], [150.0, 260.0]]))
    widget.name.value = "greenhouse"
    ui.run(widget, widget.encode_button)
    widget.score_thr.value = 0.0
    ui.run(widget, widget.apply_button)
    _shoot(window, widget, qtbot, "napari_concepts.png")


def test_interactive_screenshot(window, connected, ui, qtbot):
    widget = _open(window, "Interactive")
    ui.click(widget.prompt_layers_button)
    window.layers["SAM3 clicks"].add(np.array([[300.0, 500.0]]))
    ui.wait(widget)
    assert widget.last_error is None, widget.status.value
    _shoot(window, widget, qtbot, "napari_interactive.png")

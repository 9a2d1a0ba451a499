"""A full-window screenshot shows a usable canvas with the SAM3 panel docked.

The picture goes to a temporary folder: docs/images/ is written only by
scripts/make_screenshots.py, run on purpose. The model is the tiny random-weight one.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.napari

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_screenshots.py"


def _script():
    spec = importlib.util.spec_from_file_location("make_screenshots", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_window_with_the_panel_docked(
    make_napari_viewer, sam3_client, s2_rgb_files, qtbot, tmp_path
):
    script = _script()
    viewer = make_napari_viewer(show=True)
    panel, table = script.window_with_panel(viewer, s2_rgb_files, sam3_client, qtbot.wait)
    assert (
        viewer.layers[-1].name == "SAM3 building, field" or viewer.layers[-1].name == "SAM3 field"
    )
    shot = script.shoot(viewer, panel, tmp_path / "panel.png", qtbot.wait)
    assert (tmp_path / "panel.png").stat().st_size > 10_000
    from qtpy.QtWidgets import QApplication

    screen = QApplication.primaryScreen().availableGeometry()
    assert shot.shape[:2] == (screen.height(), screen.width()), "the window fills the screen"
    # The table beside it lists every object of the result layers (score_thr 0: there are some).
    results = {
        layer.name: layer.features["index"].tolist()
        for layer in viewer.layers
        if layer.name.startswith("SAM3 ")
    }
    rows = table.shown_rows()
    assert {name: rows.loc[rows["layer"] == name, "index"].tolist() for name in results} == results
    assert len(rows) == sum(map(len, results.values())) > 0

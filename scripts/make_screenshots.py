"""Write the README's napari screenshots to docs/images/ (run on purpose, never by the tests).

    .venv/bin/python scripts/make_screenshots.py --repository path/to/model_repository

Under its own virtual display of a laptop screen (``--size``, default 1366x768, as the
laptop-screen tests use), with napari's and the plugin's settings of this run only: opens the
Sentinel-2 sample through the plugin's reader, docks the SAM3 panel and the results table as
napari's Plugins menu does, sizes the window to the screen, segments two keywords and saves the
whole window. The tests call `shoot` on a temporary folder to check the picture is usable
(tests/plugin/test_screenshots.py).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
SCREEN = "1366x768"


def window_with_panel(viewer, files, client, qtbot_wait):
    """Open `files` in `viewer`, dock the panel and the table, fill the screen, run one text
    prompt."""
    from qtpy.QtWidgets import QApplication

    from napari_sam3.plugin.widgets._common import STATE

    viewer.open([str(f) for f in files], stack=True, plugin="napari-sam3")
    STATE.set_client(client)
    _dock, panel = viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    _dock, table = viewer.window.add_plugin_dock_widget("napari-sam3", "Results")
    viewer.window._qt_window.setGeometry(QApplication.primaryScreen().availableGeometry())
    text = panel.mode("Text & exemplars")
    text.keywords.value = "building, field"
    panel.score_thr.value = 0.0
    panel.max_det.value = 10
    text.run()
    while text.job.running:
        qtbot_wait(50)
    if text.last_error is not None:
        raise RuntimeError(text.status.value)
    panel.scroll.ensureWidgetVisible(text.run_button.native)  # the tab, down to its button
    return panel, table


def shoot(viewer, widget, path: Path, settle) -> np.ndarray:
    """Save the whole window to `path`; check the canvas is usable and `widget` is in it."""
    from PIL import Image
    from qtpy.QtCore import QPoint

    settle(300)  # docking, layout and the canvas settle
    shot = np.asarray(viewer.screenshot(canvas_only=False, flash=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(shot).save(path)

    canvas = viewer.window._qt_viewer.canvas.native
    window = widget.native.window()
    ratio = shot.shape[1] / window.width()
    origin = canvas.mapTo(window, QPoint(0, 0))
    top, left = round(origin.y() * ratio), round(origin.x() * ratio)
    area = shot[
        top : top + round(canvas.height() * ratio), left : left + round(canvas.width() * ratio)
    ]
    if area.shape[0] < 200 or area.shape[1] < 300:
        raise AssertionError(f"the canvas is a sliver: {area.shape[1]} x {area.shape[0]} px")
    if np.unique(area[::4, ::4, :3].reshape(-1, 3), axis=0).shape[0] < 50:
        raise AssertionError("the canvas is (nearly) uniform: nothing is drawn")

    grab = widget.native.grab().toImage()
    ptr = grab.constBits()
    ptr.setsize(grab.sizeInBytes())
    own = np.frombuffer(ptr, np.uint8).reshape(grab.height(), grab.bytesPerLine() // 4, 4)
    own = own[:, : grab.width(), [2, 1, 0]]  # BGRA -> RGB
    origin = widget.native.mapTo(window, QPoint(0, 0))
    top, left = round(origin.y() * ratio), round(origin.x() * ratio)
    height, width = own.shape[:2]
    if height <= 50 or width <= 100:
        raise AssertionError("the panel is not laid out")
    region = shot[top : top + height, left : left + width, :3].astype(int)
    if region.shape[:2] != own.shape[:2]:
        raise AssertionError("the panel reaches outside the window")
    same = np.mean(np.abs(region - own.astype(int)) <= 8)
    if same <= 0.97:
        raise AssertionError(f"the panel is not in the screenshot ({same:.1%} of it matches)")
    return shot


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", required=True, help="a model repository (sam3-export)")
    parser.add_argument("--out", default=str(IMAGES), help="folder for the PNGs")
    parser.add_argument("--size", default=SCREEN, help="the screen, WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from pyvirtualdisplay import Display

    with tempfile.TemporaryDirectory() as home, Display(size=(width, height), color_depth=24):
        os.environ["NAPARI_CONFIG"] = os.path.join(home, "napari.yaml")
        os.environ["NAPARI_SAM3_CONFIG_DIR"] = os.path.join(home, "sam3")
        out = _shoot_panel(args.repository, Path(args.out))
    print(f"wrote {out}")
    return 0


def _shoot_panel(repository: str, folder: Path) -> Path:
    import time

    import napari
    from qtpy.QtWidgets import QApplication

    from napari_sam3.client.sam3 import Sam3Client
    from napari_sam3.plugin.sample_data import sentinel2_true_colour

    def settle(ms: int) -> None:
        end = time.monotonic() + ms / 1000
        while time.monotonic() < end:
            QApplication.processEvents()
            time.sleep(0.01)

    viewer = napari.Viewer(show=True)
    client = Sam3Client.local(repository)
    try:
        panel, _table = window_with_panel(viewer, sentinel2_true_colour(), client, settle)
        out = folder / "napari_panel.png"
        shoot(viewer, panel, out, settle)
    finally:
        viewer.close()
        client.close()
    return out


if __name__ == "__main__":
    raise SystemExit(main())

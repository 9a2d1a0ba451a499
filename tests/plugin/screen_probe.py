"""Measure napari with the SAM3 panel and the results table docked on the screen it runs on.

The laptop-screen tests call `dock` and `measure` in their own napari (pytest-xvfb's screen,
1366 x 768: pyproject's ``xvfb_width`` / ``xvfb_height``); to check another screen size they run
this file in a new process under a virtual display of that size, where it prints the same
measurements as JSON:

    python tests/plugin/screen_probe.py --size 1920x1080 --repository MODEL_REPOSITORY
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def dock(viewer, files, client, settle):
    """Open `files` through the plugin's reader, connect `client`, dock the panel and the
    results table as napari's Plugins menu does, and size the window to the whole screen."""
    from qtpy.QtWidgets import QApplication

    from napari_sam3.plugin.widgets._common import STATE

    viewer.open([str(f) for f in files], stack=True, plugin="napari-sam3")
    _dock, panel = viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    _dock, table = viewer.window.add_plugin_dock_widget("napari-sam3", "Results")
    STATE.set_client(client)
    window = viewer.window._qt_window
    window.setGeometry(QApplication.primaryScreen().availableGeometry())
    settle(300)
    return panel, table


def measure(viewer, panel, settle) -> dict:
    """What an analyst sees: the screen, the window, the connection line, the advanced section,
    and for every tab whether its run button can be reached (shown, after scrolling to it) on
    the screen."""
    from qtpy.QtCore import QPoint, QRect
    from qtpy.QtWidgets import QApplication

    from napari_sam3.plugin.widgets.panel import TABS

    screen = QApplication.primaryScreen().availableGeometry()
    window = viewer.window._qt_window
    frame = window.frameGeometry()
    line = panel.summary.fontMetrics().height()
    out = {
        "screen": [screen.width(), screen.height()],
        "window": [frame.width(), frame.height()],
        "window_minimum": [window.minimumSizeHint().width(), window.minimumSizeHint().height()],
        "canvas": [
            viewer.window._qt_viewer.canvas.native.width(),
            viewer.window._qt_viewer.canvas.native.height(),
        ],
        "connection_form_shown": not panel.connection.native.isHidden(),
        "summary": panel.summary.text(),
        "summary_lines": round(panel.summary.height() / line),
        "change_button_shown": panel.change_button.native.isVisible(),
        "advanced_expanded": panel.advanced.isExpanded(),
        "thresholds_shown": panel.advanced.content().height() > 0,
        "tabs": {},
    }
    viewport = panel.scroll.viewport()
    for title in TABS:
        panel.mode(title)
        button = panel.run_button(title).native
        # The layout settles over a few event-loop turns, more on a loaded machine: scroll to
        # the button again until it is in view (a button that cannot be reached never is).
        for _ in range(20):
            settle(50)
            panel.scroll.ensureWidgetVisible(button)
            settle(50)
            in_viewport = QRect(button.mapTo(viewport, QPoint(0, 0)), button.size())
            on_screen = QRect(button.mapToGlobal(QPoint(0, 0)), button.size())
            seen = viewport.rect().contains(in_viewport) and screen.contains(on_screen)
            if button.isVisible() and seen:
                break
        page = panel.tabs.currentWidget()
        out["tabs"][title] = {
            "button": button.text(),
            "shown": button.isVisible(),
            "in_view": viewport.rect().contains(in_viewport),
            "on_screen": screen.contains(on_screen),
            "tab_height": panel.tabs.height(),
            "page_height": page.sizeHint().height(),
        }
    panel.mode(TABS[0])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1920x1080", help="screen WIDTHxHEIGHT")
    parser.add_argument("--repository", required=True, help="a model repository (sam3-export)")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from pyvirtualdisplay import Display

    with tempfile.TemporaryDirectory() as home, Display(size=(width, height), color_depth=24):
        # napari's and the plugin's settings of this run only (no remembered window size).
        os.environ["NAPARI_CONFIG"] = os.path.join(home, "napari.yaml")
        os.environ["NAPARI_SAM3_CONFIG_DIR"] = os.path.join(home, "sam3")
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
        client = Sam3Client.local(args.repository, precision="fp32")
        panel, _table = dock(viewer, sentinel2_true_colour(), client, settle)
        result = measure(viewer, panel, settle)
        viewer.close()
        client.close()
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The SAM3 dock in the real QGIS desktop application (`qgis --code` under Xvfb): the installed
plugin adds it beside the map with a toolbar and Raster-menu action, and its unload takes them
away again."""

from __future__ import annotations

import json
import subprocess

INSIDE = """
import json, os
from qgis.PyQt.QtCore import Qt, QTimer
from qgis.PyQt.QtWidgets import QApplication, QDockWidget
from qgis.utils import iface, plugins


def check():
    window = iface.mainWindow()
    out = {"loaded": "napari_sam3_qgis" in plugins}
    plugin = plugins.get("napari_sam3_qgis")
    if plugin is not None:
        docks = window.findChildren(QDockWidget, "napari_sam3_dock")
        out["docks"] = len(docks)
        out["area"] = int(window.dockWidgetArea(docks[0])) if docks else None
        out["right"] = int(Qt.RightDockWidgetArea)
        menu = [a.text() for m in window.findChildren(type(iface.rasterMenu()))
                if m.title() == "napari-sam3" for a in m.actions()]
        out["menu"] = menu
        out["toolbar"] = [a.text() for a in iface.pluginToolBar().actions()]
        plugin.dock.show()
        QApplication.processEvents()
        out["visible"] = plugin.dock.isVisible() and window.isAncestorOf(plugin.dock)
        plugin.unload()
        QApplication.processEvents()
        from qgis.PyQt.QtCore import QEvent
        QApplication.sendPostedEvents(None, QEvent.DeferredDelete)
        out["docks_after"] = len(window.findChildren(QDockWidget, "napari_sam3_dock"))
        out["toolbar_after"] = [a.text() for a in iface.pluginToolBar().actions()]
    with open(os.environ["DOCK_APP_OUT"], "w") as f:
        json.dump(out, f)
    QTimer.singleShot(0, lambda: QApplication.instance().exit(0))


QTimer.singleShot(500, check)
"""


def test_the_plugin_adds_the_dock_to_qgis_and_unload_removes_it(qgis_env, profile, tmp_path):
    script, out = tmp_path / "inside.py", tmp_path / "out.json"
    script.write_text(INSIDE)
    # the desktop needs a display (offscreen, it crashed at start in QgsClipboard): Xvfb's
    env = {k: v for k, v in qgis_env.items() if k != "QT_QPA_PLATFORM"}
    env["DOCK_APP_OUT"] = str(out)
    done = subprocess.run(
        ["xvfb-run", "-a", "qgis", "--nologo", "--noversioncheck", "--code", str(script)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.is_file(), done.stdout[-6000:] + done.stderr[:6000]
    got = json.loads(out.read_text())
    assert got["loaded"] and got["docks"] == 1 and got["area"] == got["right"]
    assert got["menu"] == ["SAM3 dock"] and "SAM3 dock" in got["toolbar"]
    assert got["visible"]
    assert got["docks_after"] == 0 and "SAM3 dock" not in got["toolbar_after"]

"""Runs a scenario against the SAM3 dock on a real QgsMapCanvas in a QgsApplication (QGIS's own
Python, Debian's python3; offscreen Qt). Never collected by pytest:
``python3 dock_driver.py PROFILE_DIR SCENARIO.py``.

It loads the plugin from the profile install_qgis_plugin.sh wrote, makes an 800 x 600 canvas, a
message bar and the dock (its engine: the plugin's shared one), then runs SCENARIO.py with the
helpers below in its namespace; the scenario calls ``report(**values)``, printed as one JSON
line each.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from qgis.core import (
    QgsApplication,
    QgsCoordinateReferenceSystem,
    QgsCoordinateTransform,
    QgsPointXY,
    QgsProject,
    QgsRasterLayer,
    QgsRectangle,
    QgsVectorLayer,
)
from qgis.PyQt.QtCore import QEvent, QPoint, Qt
from qgis_start import start_qgis


def main(profile: str, scenario: str) -> int:
    app = start_qgis(profile, gui=True)
    sys.path.insert(0, str(Path(profile) / "python" / "plugins"))
    from napari_sam3_qgis.dock import Sam3Dock
    from qgis.gui import QgsMapCanvas, QgsMessageBar

    canvas = QgsMapCanvas()
    canvas.resize(800, 600)
    canvas.show()
    bar = QgsMessageBar()
    dock = Sam3Dock(canvas, bar, shared_engine)
    dock.show()
    namespace = {
        "app": app, "canvas": canvas, "bar": bar, "dock": dock, "engine": shared_engine,
        "report": report, "load_raster": load_raster, "load_vector": load_vector,
        "view": lambda crs, extent: view(canvas, crs, extent),
        "mouse": lambda tool, kind, x, y, crs, shift=False: mouse(canvas, tool, kind, x, y, crs, shift),
        "key": lambda tool, name, ctrl=False: key(tool, name, ctrl),
        "wait": lambda timeout=300: wait(dock, timeout), "messages": lambda: messages(bar),
        "features": features, "QgsProject": QgsProject,
    }  # fmt: skip
    try:
        exec(compile(Path(scenario).read_text(), scenario, "exec"), namespace)
    finally:
        dock.unload()
        if "napari_sam3_qgis.engine" in sys.modules:  # started by the scenario: stopped here
            sys.modules["napari_sam3_qgis.engine"].stop_shared()
        namespace.clear()
        # the widgets and layers go before QGIS does (left to exitQgis, the process crashed)
        QgsProject.instance().clear()
        for widget in (dock, bar, canvas):
            widget.close()
            widget.deleteLater()
        QgsApplication.sendPostedEvents(None, QEvent.DeferredDelete)
        QgsApplication.processEvents()
    app.exitQgis()
    return 0


def shared_engine():
    """The plugin's engine of this session (imported when the scenario first needs it)."""
    from napari_sam3_qgis.engine import shared

    return shared()


def report(**values) -> None:
    print(json.dumps(values), flush=True)


def load_raster(path: str, name: str = "scene") -> QgsRasterLayer:
    layer = QgsRasterLayer(path, name)
    assert layer.isValid(), path
    QgsProject.instance().addMapLayer(layer)
    return layer


def load_vector(uri: str, name: str, provider: str = "ogr") -> QgsVectorLayer:
    layer = QgsVectorLayer(uri, name, provider)
    assert layer.isValid(), uri
    QgsProject.instance().addMapLayer(layer)
    return layer


def view(canvas, crs: str, extent: list[float]) -> None:
    """The canvas in `crs`, showing `extent` (given in `crs`)."""
    canvas.setDestinationCrs(QgsCoordinateReferenceSystem(crs))
    canvas.setLayers(list(QgsProject.instance().mapLayers().values()))
    canvas.setExtent(QgsRectangle(*extent))
    canvas.refresh()
    QgsApplication.processEvents()


def mouse(canvas, tool, kind: str, x: float, y: float, crs: str, shift: bool) -> dict:
    """A mouse event (press, move, release) at the map point (x, y) given in `crs`, sent to the
    tool as the canvas would; returns the event's pixel and map point (canvas CRS)."""
    from qgis.gui import QgsMapMouseEvent

    to_canvas = QgsCoordinateTransform(
        QgsCoordinateReferenceSystem(crs),
        canvas.mapSettings().destinationCrs(),
        QgsProject.instance(),
    )
    point = to_canvas.transform(QgsPointXY(x, y))
    pixel = canvas.getCoordinateTransform().transform(point)
    types = {"press": QEvent.MouseButtonPress, "move": QEvent.MouseMove,
             "release": QEvent.MouseButtonRelease}  # fmt: skip
    modifiers = Qt.ShiftModifier if shift else Qt.NoModifier
    event = QgsMapMouseEvent(
        canvas, types[kind], QPoint(round(pixel.x()), round(pixel.y())), Qt.LeftButton,
        Qt.LeftButton, modifiers,
    )  # fmt: skip
    handler = {"press": tool.canvasPressEvent, "move": tool.canvasMoveEvent,
               "release": tool.canvasReleaseEvent}[kind]  # fmt: skip
    handler(event)
    return {"pixel": [event.pixelPoint().x(), event.pixelPoint().y()],
            "map": [event.mapPoint().x(), event.mapPoint().y()]}  # fmt: skip


def key(tool, name: str, ctrl: bool) -> bool:
    """A key press on the active tool (as the canvas forwards it); whether the tool took it."""
    from qgis.PyQt.QtGui import QKeyEvent

    modifiers = Qt.ControlModifier if ctrl else Qt.NoModifier
    event = QKeyEvent(QEvent.KeyPress, getattr(Qt, f"Key_{name}"), modifiers)
    tool.keyPressEvent(event)
    return event.isAccepted()


def wait(dock, timeout: float) -> None:
    """Process QGIS's events until the dock's engine job (and any chained one) is done."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        QgsApplication.processEvents()
        if dock._job is None:
            QgsApplication.processEvents()
            if dock._job is None:
                return
        time.sleep(0.01)
    raise TimeoutError("the dock's job did not finish")


def messages(bar) -> list[dict]:
    return [{"title": item.title(), "text": item.text(), "level": int(item.level())}
            for item in bar.items()]  # fmt: skip


def features(layer) -> list[dict]:
    out = []
    for feature in layer.getFeatures():
        row = {f.name(): feature[f.name()] for f in layer.fields()}
        row = {k: (None if v is None or str(type(v)).endswith("QVariant'>") else v)
               for k, v in row.items()}  # fmt: skip
        row["wkt"] = feature.geometry().asWkt()
        out.append(row)
    return out


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))

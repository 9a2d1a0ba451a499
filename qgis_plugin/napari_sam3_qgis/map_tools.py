"""The dock's map tools: a point tool (click = positive, Shift-click = negative) and a box tool
(drag). They hand the dock map coordinates in the RASTER's CRS (the canvas's CRS may differ)
and, while active, take the dock's keys on the canvas, where they cannot clash with QGIS's
shortcuts (the active map tool sees the canvas's key presses first)."""

from __future__ import annotations

from qgis.core import (
    QgsCoordinateReferenceSystem,
    QgsCoordinateTransform,
    QgsGeometry,
    QgsPointXY,
    QgsProject,
    QgsRectangle,
    QgsWkbTypes,
)
from qgis.gui import QgsMapTool, QgsRubberBand
from qgis.PyQt.QtCore import Qt, pyqtSignal
from qgis.PyQt.QtGui import QColor

# key -> the dock's command, while one of its tools is active on the canvas
KEYS = {
    Qt.Key_P: "point",
    Qt.Key_B: "box",
    Qt.Key_Tab: "cycle",
    Qt.Key_Escape: "reset",
    Qt.Key_Backspace: "undo",
}
ACCEPT_KEYS = (Qt.Key_Return, Qt.Key_Enter)  # Ctrl+Enter: accept; Enter alone: next object


def to_raster(canvas, crs: QgsCoordinateReferenceSystem) -> QgsCoordinateTransform:
    """Canvas CRS -> the raster's, with the project's datum transformations."""
    return QgsCoordinateTransform(canvas.mapSettings().destinationCrs(), crs, QgsProject.instance())


class _Tool(QgsMapTool):
    command = pyqtSignal(str)

    def __init__(self, canvas, crs_of_raster) -> None:
        super().__init__(canvas)
        self._crs_of_raster = crs_of_raster  # () -> the current raster's CRS, or None
        self.setCursor(Qt.CrossCursor)

    def _transform(self) -> QgsCoordinateTransform | None:
        crs = self._crs_of_raster()
        return None if crs is None else to_raster(self.canvas(), crs)

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if event.key() in ACCEPT_KEYS:
            ctrl = bool(event.modifiers() & Qt.ControlModifier)
            self.command.emit("accept" if ctrl else "keep")
        elif event.key() in KEYS and not event.modifiers() & ~Qt.KeypadModifier:
            self.command.emit(KEYS[event.key()])
        else:
            event.ignore()
            return
        event.accept()


class PointTool(_Tool):
    """A click: `clicked(x, y, positive)` in the raster's CRS."""

    clicked = pyqtSignal(float, float, bool)

    def canvasReleaseEvent(self, event) -> None:  # noqa: N802
        if event.button() != Qt.LeftButton:
            return
        transform = self._transform()
        if transform is None:
            self.command.emit("no-raster")
            return
        point = transform.transform(QgsPointXY(event.mapPoint()))
        positive = not event.modifiers() & Qt.ShiftModifier
        self.clicked.emit(point.x(), point.y(), bool(positive))


class BoxTool(_Tool):
    """A drag: `boxed(xmin, ymin, xmax, ymax)` in the raster's CRS (the canvas rectangle's
    bounding box there), drawn as a rubber band while dragging."""

    boxed = pyqtSignal(float, float, float, float)

    def __init__(self, canvas, crs_of_raster) -> None:
        super().__init__(canvas, crs_of_raster)
        self._start = None
        self._band = QgsRubberBand(canvas, QgsWkbTypes.PolygonGeometry)
        self._band.setColor(QColor(255, 200, 0, 60))
        self._band.setStrokeColor(QColor(255, 160, 0))
        self._band.setWidth(2)

    def canvasPressEvent(self, event) -> None:  # noqa: N802
        if event.button() == Qt.LeftButton:
            self._start = QgsPointXY(event.mapPoint())

    def canvasMoveEvent(self, event) -> None:  # noqa: N802
        if self._start is not None:
            rect = QgsRectangle(self._start, QgsPointXY(event.mapPoint()))
            self._band.setToGeometry(QgsGeometry.fromRect(rect), None)

    def canvasReleaseEvent(self, event) -> None:  # noqa: N802
        if self._start is None or event.button() != Qt.LeftButton:
            return
        rect = QgsRectangle(self._start, QgsPointXY(event.mapPoint()))
        self._start = None
        self._band.reset(QgsWkbTypes.PolygonGeometry)
        if rect.width() == 0 or rect.height() == 0:
            return  # a click, not a box
        transform = self._transform()
        if transform is None:
            self.command.emit("no-raster")
            return
        box = transform.transformBoundingBox(rect)
        self.boxed.emit(box.xMinimum(), box.yMinimum(), box.xMaximum(), box.yMaximum())

    def deactivate(self) -> None:
        self._start = None
        self._band.reset(QgsWkbTypes.PolygonGeometry)
        super().deactivate()

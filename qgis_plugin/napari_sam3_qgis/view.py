"""What the map canvas and the analyst's layers say, in the raster's CRS: the view's extent and
resolution (for keywords in view), and selected features as exemplar boxes."""

from __future__ import annotations

from qgis.core import (
    QgsCoordinateReferenceSystem,
    QgsCoordinateTransform,
    QgsDistanceArea,
    QgsGeometry,
    QgsPointXY,
    QgsProject,
    QgsUnitTypes,
)

from .results import DockError


def view_extent(canvas, crs: QgsCoordinateReferenceSystem) -> list[float]:
    """The canvas's visible extent as [xmin, ymin, xmax, ymax] in `crs` (its bounding box)."""
    transform = QgsCoordinateTransform(
        canvas.mapSettings().destinationCrs(), crs, QgsProject.instance()
    )
    box = transform.transformBoundingBox(canvas.extent())
    return [box.xMinimum(), box.yMinimum(), box.xMaximum(), box.yMaximum()]


def view_gsd(canvas) -> float:
    """Metres per screen pixel across the middle of the view (ellipsoidal: any canvas CRS)."""
    extent, width = canvas.extent(), canvas.mapSettings().outputSize().width()
    middle = extent.center().y()
    distance = QgsDistanceArea()
    distance.setSourceCrs(
        canvas.mapSettings().destinationCrs(), QgsProject.instance().transformContext()
    )
    ellipsoid = QgsProject.instance().ellipsoid()
    # a project without one says "NONE" (planar: web mercator metres are not ground metres)
    distance.setEllipsoid(ellipsoid if ellipsoid not in ("", "NONE") else "EPSG:7030")
    length = distance.measureLine(
        QgsPointXY(extent.xMinimum(), middle), QgsPointXY(extent.xMaximum(), middle)
    )
    metres = distance.convertLengthMeasurement(length, QgsUnitTypes.DistanceMeters)
    return metres / max(1, width)


def native_gsd(transform: list[float], crs: QgsCoordinateReferenceSystem) -> float:
    """The raster's pixel size in metres (from its affine transform and its CRS's unit)."""
    factor = QgsUnitTypes.fromUnitToUnitFactor(crs.mapUnits(), QgsUnitTypes.DistanceMeters)
    return abs(transform[0]) * factor


def exemplar_boxes(layer, crs: QgsCoordinateReferenceSystem, positive: bool) -> list[list]:
    """The selected features of a polygon layer (any CRS) as boxes in `crs`:
    [[xmin, ymin, xmax, ymax, 1 | 0], ...]."""
    if layer is None:
        raise DockError("choose the polygon layer whose selected features are the exemplars")
    selected = layer.selectedFeatures()
    if not selected:
        raise DockError(f"select the exemplar polygons in {layer.name()} first (none selected)")
    transform = QgsCoordinateTransform(layer.crs(), crs, QgsProject.instance())
    out = []
    for feature in selected:
        if not feature.hasGeometry():
            continue
        geometry = QgsGeometry(feature.geometry())  # its vertices, not its box (a box grows)
        if geometry.transform(transform) != 0:
            raise DockError(
                f"a selected feature of {layer.name()} cannot be put in the raster's CRS"
            )
        box = geometry.boundingBox()
        out.append([box.xMinimum(), box.yMinimum(), box.xMaximum(), box.yMaximum(), int(positive)])
    if not out:
        raise DockError(f"the selected features of {layer.name()} have no geometry")
    return out

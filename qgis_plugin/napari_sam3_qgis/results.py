"""The dock's results: a temporary (memory) layer of polygons with their provenance, filtered by
score without a model run, accepted into the analyst's own layer through its edit buffer, or
exported with QGIS's own writers."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from qgis.core import (
    QgsCoordinateReferenceSystem,
    QgsCoordinateTransform,
    QgsFeature,
    QgsField,
    QgsFields,
    QgsFillSymbol,
    QgsGeometry,
    QgsProject,
    QgsVectorFileWriter,
    QgsVectorLayer,
    QgsWkbTypes,
)
from qgis.PyQt.QtCore import QVariant

# name -> type of the provenance the dock writes on each polygon
FIELDS = (
    ("keyword", QVariant.String),
    ("score", QVariant.Double),
    ("prompt", QVariant.String),
    ("source", QVariant.String),
    ("model", QVariant.String),
    ("created", QVariant.String),
    ("area_m2", QVariant.Double),
)


class DockError(Exception):
    """What the dock shows the analyst in the message bar (never a traceback)."""


def fields() -> QgsFields:
    out = QgsFields()
    for name, kind in FIELDS:
        out.append(QgsField(name, kind))
    return out


def new_layer(crs_wkt: str, name: str = "SAM3 results") -> QgsVectorLayer:
    """An empty memory layer of polygons in the raster's CRS with the provenance fields."""
    layer = QgsVectorLayer("MultiPolygon", name, "memory")
    layer.setCrs(QgsCoordinateReferenceSystem.fromWkt(crs_wkt))
    layer.dataProvider().addAttributes(list(fields()))
    layer.updateFields()
    # outlines over a light fill: the imagery stays visible under the polygons
    symbol = QgsFillSymbol.createSimple(
        {"color": "255,200,0,50", "outline_color": "255,140,0,255", "outline_width": "0.5"}
    )
    layer.renderer().setSymbol(symbol)
    return layer


def feature(layer: QgsVectorLayer, row: dict, prompt: str, source: str, model: str) -> QgsFeature:
    """One engine row ({"wkt", "score", "keyword"?, "area_m2"?}) as a feature of `layer`."""
    geometry = QgsGeometry.fromWkt(row["wkt"])
    if geometry.isNull():
        raise DockError(f"the engine sent a polygon QGIS cannot read: {row['wkt'][:60]}...")
    geometry.convertToMultiType()
    out = QgsFeature(layer.fields())
    out.setGeometry(geometry)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: UP017 - QGIS 3.22 on Windows has Python 3.9
    values = {
        "keyword": row.get("keyword") or "",
        "score": float(row["score"]),
        "prompt": prompt,
        "source": source,
        "model": model,
        "created": created,
        "area_m2": row.get("area_m2"),
    }
    for name, value in values.items():
        out.setAttribute(name, value)
    return out


def add(layer: QgsVectorLayer, features: list[QgsFeature]) -> list[int]:
    """Add to the memory layer (its provider: no edit session); the new feature ids."""
    ok, added = layer.dataProvider().addFeatures(features)
    if not ok:
        raise DockError(f"QGIS refused the polygons: {layer.dataProvider().lastError()}")
    layer.updateExtents()
    layer.triggerRepaint()
    return [f.id() for f in added]


def replace(layer: QgsVectorLayer, fid: int | None, new: QgsFeature) -> int:
    """The object being drawn: its earlier candidate (fid) replaced by `new`; the new id."""
    if fid is not None:
        remove(layer, [fid])
    return add(layer, [new])[0]


def remove(layer: QgsVectorLayer, fids: list[int]) -> None:
    layer.dataProvider().deleteFeatures(fids)
    layer.triggerRepaint()


def filter_score(layer: QgsVectorLayer, minimum: float) -> int:
    """Show only polygons scoring at least `minimum` (a subset string: no model run); how many."""
    subset = f'"score" >= {minimum:.6f}' if minimum > 0 else ""
    if layer.subsetString() != subset:  # setting it again reloads the layer: not per click
        layer.setSubsetString(subset)
        layer.triggerRepaint()
    return layer.featureCount()


def accept(results: QgsVectorLayer, target: QgsVectorLayer) -> int:
    """Copy the polygons the filter keeps into `target` through its edit buffer as ONE edit
    command (the layer's undo stack takes it back); fields mapped by name, geometry transformed
    to the target's CRS. The analyst's features are never changed, nor saved: that stays the
    analyst's choice. Returns how many features were added."""
    if target is None or not isinstance(target, QgsVectorLayer) or not target.isValid():
        raise DockError("choose a polygon layer to accept into")
    if target.geometryType() != QgsWkbTypes.PolygonGeometry:
        raise DockError(f"{target.name()} is not a polygon layer: choose one to accept into")
    if target.id() == results.id():
        raise DockError("the results layer cannot take its own polygons: choose another layer")
    if not target.isEditable() and not target.startEditing():
        raise DockError(f"{target.name()} cannot be edited (read-only file or provider)")
    transform = QgsCoordinateTransform(results.crs(), target.crs(), QgsProject.instance())
    multi = QgsWkbTypes.isMultiType(target.wkbType())
    keys = {target.fields().at(i).name() for i in target.primaryKeyAttributes()}
    names = [f.name() for f in results.fields() if f.name() in target.fields().names()]
    names = [name for name in names if name not in keys]
    copies = []
    for source in results.getFeatures():
        geometry = QgsGeometry(source.geometry())
        if geometry.transform(transform) != 0:
            raise DockError(f"a polygon cannot be transformed to {target.crs().authid()}")
        # a single-part layer gets one feature per part (its writer would keep the first alone)
        for part in [geometry] if multi else geometry.asGeometryCollection():
            copy = QgsFeature(target.fields())
            copy.setGeometry(part)
            for name in names:
                copy.setAttribute(name, source[name])
            copies.append(copy)
    if not copies:
        return 0
    target.beginEditCommand(f"SAM3: {len(copies)} polygon(s)")
    if not target.addFeatures(copies):
        target.destroyEditCommand()
        raise DockError(f"{target.name()} refused the polygons (geometry type or fields)")
    target.endEditCommand()
    target.triggerRepaint()
    return len(copies)


def export(layer: QgsVectorLayer, path: str) -> str:
    """The filtered results into a new file by QGIS's writer for its extension; an existing
    file is refused (the analyst chooses another name or removes it)."""
    target = Path(path)
    if target.exists():
        raise DockError(f"{target} exists: choose another name (nothing was overwritten)")
    driver = QgsVectorFileWriter.driverForExtension(target.suffix)
    if not driver:
        raise DockError(f"no QGIS writer for '{target.suffix}': use .gpkg, .shp, .geojson, .fgb")
    options = QgsVectorFileWriter.SaveVectorOptions()
    options.driverName = driver
    options.layerName = target.stem
    error, message, *_ = QgsVectorFileWriter.writeAsVectorFormatV3(
        layer, str(target), QgsProject.instance().transformContext(), options
    )
    if error != QgsVectorFileWriter.NoError:
        raise DockError(f"QGIS could not write {target}: {message}")
    return str(target)

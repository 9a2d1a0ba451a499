"""The results table: every object of every SAM3 result layer, to inspect, reject, merge, export.

One row per object (its layer's ``features``): sort by any column, click a row to select the
object and zoom to it, delete the rejected ones (their pixels go, through the layer's undo
history), merge the kept ones into the analyst's labels layer (new ids, never over existing
labels unless asked, one undo step in that layer), export all or the selected rows to any
vector format of `napari_sam3.core.formats` with their attributes (`napari_sam3.gis.vector`). A
result whose image layer was deleted stays listed, and its Image column says so.

The table logic that is not Qt (which pixels, which ids, which rows) is in plain functions here,
usable from a notebook with a viewer.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
from magicgui.widgets import CheckBox, ComboBox, Container, Label, PushButton
from napari.layers import Labels

from napari_sam3.core.columns import FEATURE_COLUMNS
from napari_sam3.core.errors import InvalidInput, UnknownKey
from napari_sam3.core.formats import vector_file_filter
from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import layer_combo, notify_error, row

COLUMNS = ("layer", *FEATURE_COLUMNS, "image")
_HEADERS = {
    "layer": "Layer",
    "index": "Label",
    "keyword": "Keyword",
    "score": "Score",
    "area": "Area (px)",
    "prompt_kind": "Prompt",
    "source": "Source",
    "image": "Image",
}
HEADERS = tuple(_HEADERS[c] for c in COLUMNS)
EXPORT_FILTER = vector_file_filter()  # every vector format the writer writes
ALL_LAYERS = "All result layers"


def is_result(layer) -> bool:
    return isinstance(layer, Labels) and _layers._record(layer).get("kind") == "result"


def result_layers(viewer) -> list:
    return [layer for layer in viewer.layers if is_result(layer)]


def image_status(viewer, layer) -> str:
    """The result's image layer, or that it was deleted (the result stays usable)."""
    name = _layers._record(layer).get("image_layer")
    if not name:
        return "(from a file)"
    if name not in [other.name for other in viewer.layers]:
        return f"image layer '{name}' deleted"
    return str(name)


def table_rows(viewer, only: str | None = None) -> pd.DataFrame:
    """One row per object of every result layer (the table's content); `only`: of the result
    layer of that name alone."""
    parts = []
    for layer in result_layers(viewer):
        if only is not None and layer.name != only:
            continue
        features = layer.features
        if "index" not in features.columns or not len(features):
            continue
        n = len(features)
        part = pd.DataFrame(
            {
                "layer": [layer.name] * n,
                "index": np.asarray(features["index"], np.int64),
                "keyword": _column(features, "keyword", ""),
                "score": np.asarray(_column(features, "score", np.nan), np.float64),
                "area": _area(layer, features),
                "prompt_kind": _column(features, "prompt_kind", ""),
                "source": _column(features, "source", ""),
                "image": [image_status(viewer, layer)] * n,
            }
        )
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(parts, ignore_index=True)


def _column(features, name, default):
    if name in features.columns:
        return list(features[name])
    return [default] * len(features)


def _area(layer, features) -> np.ndarray:
    if "area" in features.columns:
        return np.asarray(features["area"], np.int64)
    counts = np.bincount(np.asarray(layer.data).ravel())
    ids = np.asarray(features["index"], np.int64)
    return np.where(ids < len(counts), counts[np.minimum(ids, len(counts) - 1)], 0)


def delete_objects(layer, ids) -> int:
    """Remove objects `ids` from a result layer: their pixels become 0 (one undo step in the
    layer's history), their feature rows go, and they stay out of a later re-filter."""
    ids = [int(i) for i in ids]
    data = layer.data
    where = np.nonzero(np.isin(data, ids))
    with layer.block_history():
        layer.data_setitem(where, 0)
    features = layer.features
    kept = features[~features["index"].isin(ids)]
    record = _layers._record(layer)
    if "object" in features.columns:
        gone = features.loc[features["index"].isin(ids), "object"].astype(int).tolist()
        record["rejected"] = sorted(set(record.get("rejected", [])) | set(gone))
    layer.features = kept.reset_index(drop=True)
    return int(where[0].size)


def offset_in(target, layer) -> tuple[int, int]:
    """(row, col) of `layer`'s pixel (0, 0) in `target`'s pixels; both must share a grid."""
    origin = np.asarray(target.world_to_data(layer.data_to_world((0.0, 0.0))), np.float64)[-2:]
    step = np.asarray(target.world_to_data(layer.data_to_world((1.0, 1.0))), np.float64)[-2:]
    rounded = np.round(origin)
    if not (np.allclose(origin, rounded, atol=1e-3) and np.allclose(step - origin, 1, atol=1e-3)):
        raise InvalidInput(
            f"{target.name} does not share {layer.name}'s pixel grid (scale/translate): merge "
            "into a labels layer made for the same image"
        )
    r0, c0 = int(rounded[0]), int(rounded[1])
    rows, cols = layer.data.shape[-2:]
    if r0 < 0 or c0 < 0 or r0 + rows > target.data.shape[-2] or c0 + cols > target.data.shape[-1]:
        raise InvalidInput(f"{layer.name} reaches outside {target.name}")
    return r0, c0


def merge_objects(layer, ids, target, overwrite: bool = False) -> list[int]:
    """Write objects `ids` of result `layer` into the analyst's labels layer `target` as new
    ids (max + 1, ...), only where `target` is 0 unless `overwrite`; one undo step in
    `target`'s history (`_layers.paint_new_labels`, as Accept writes). Returns the new ids (an
    object wholly on existing labels gets none)."""
    if target is layer:
        raise InvalidInput("choose another labels layer to merge into")
    if target.data.ndim != 2:
        raise InvalidInput(f"{target.name} is not 2-D")
    r0, c0 = offset_in(target, layer)
    data = np.asarray(layer.data)
    features = layer.features.set_index("index")
    objects = []
    for i in ids:
        rr, cc = np.nonzero(data == int(i))
        info = features.loc[int(i)] if int(i) in features.index else pd.Series(dtype=object)
        objects.append((rr + r0, cc + c0, {**info, "source": info.get("source", layer.name)}))
    georeference = None
    if "transform" in layer.metadata:
        from napari_sam3.plugin.georef import crop_metadata

        georeference = crop_metadata(layer.metadata, -r0, -c0)
    painted = _layers.paint_new_labels(target, objects, overwrite, georeference)
    return painted.ids


def objects_frame(layer, ids=None) -> pd.DataFrame:
    """The objects of a result layer (all, or `ids`) as a results DataFrame: mask, score, ..."""
    features = layer.features
    if ids is not None:
        features = features[features["index"].isin([int(i) for i in ids])]
    data = np.asarray(layer.data)
    frame = pd.DataFrame(
        {
            "mask": [data == int(i) for i in features["index"]],
            "score": np.asarray(_column(features, "score", np.nan), np.float64),
            "keyword": [str(k) for k in _column(features, "keyword", "")],
            "prompt_kind": [str(k) for k in _column(features, "prompt_kind", "")],
            "source": [str(k) for k in _column(features, "source", layer.name)],
            "label": np.asarray(features["index"], np.int64),
        }
    )
    return frame.reset_index(drop=True)


def export_objects(layer, path, ids=None, overwrite: bool = False) -> Path:
    """Write a result layer's objects (all, or `ids`) as polygons with their attributes."""
    from rasterio.transform import Affine

    from napari_sam3.gis.vector import to_geodataframe, write_vector

    metadata = layer.metadata or {}
    transform = metadata.get("transform")
    if transform is None:
        raise InvalidInput(
            f"{layer.name} has no georeferencing (no 'transform' in its metadata): open the image "
            "with napari-sam3's reader so results carry its CRS"
        )
    frame = objects_frame(layer, ids)
    if not len(frame):
        raise InvalidInput("no objects to export: select rows, or export all")
    gdf = to_geodataframe(frame, crs=metadata.get("crs"), transform=Affine(*transform[:6]))
    return write_vector(gdf, path, overwrite=overwrite)


def _number_item(value: float | int, shown: float | int):
    """A cell that shows `shown` (a score to four decimals) and sorts by the exact `value`:
    two scores equal to the shown precision still sort in their true order."""
    from qtpy.QtCore import Qt

    item = _number_item_type()()
    item.setData(Qt.ItemDataRole.DisplayRole, shown)
    item.setData(_sort_role(), value)
    return item


@functools.cache
def _number_item_type() -> type:
    from qtpy.QtWidgets import QTableWidgetItem

    class NumberItem(QTableWidgetItem):
        def __lt__(self, other) -> bool:
            mine, theirs = self.data(_sort_role()), other.data(_sort_role())
            if mine is None or theirs is None:  # a text cell in a number column
                return super().__lt__(other)
            return _sort_key(mine) < _sort_key(theirs)

    return NumberItem


def _sort_role() -> int:
    from qtpy.QtCore import Qt

    return int(Qt.ItemDataRole.UserRole) + 1  # UserRole itself holds the row number


def _sort_key(value: float) -> tuple[bool, float]:
    """Missing values (NaN) first, then by value: a total order, so sorting is well defined."""
    missing = value != value
    return (not missing, 0.0 if missing else value)


class ResultsTable(Container):
    """Dock widget: the objects of every SAM3 result layer."""

    def __init__(self, napari_viewer) -> None:
        from qtpy.QtWidgets import QAbstractItemView, QTableWidget

        super().__init__(labels=True)
        self.viewer = napari_viewer
        self.last_error: BaseException | None = None
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(HEADERS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSortingEnabled(True)
        self.table.setMinimumHeight(90)  # leaves the SAM3 panel room on a laptop screen
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.only = ComboBox(
            label="Show",
            choices=self._show_choices,
            tooltip="The objects of every result layer, or of one (e.g. one change class)",
        )
        self.only.changed.connect(self.refresh)
        self.delete_button = PushButton(text="Delete selected")
        self.target = layer_combo(
            napari_viewer,
            Labels,
            "Merge into",
            nullable=True,
            tooltip="Your labels layer on the same image (never overwritten unless ticked)",
        )
        self.overwrite = CheckBox(value=False, text="Merge over existing labels")
        self.merge_button = PushButton(text="Merge kept")
        self.export_button = PushButton(text="Export…")
        self.export_overwrite = CheckBox(value=False, text="Replace an existing file")
        self.status = Label(value="", label="Status")
        self.status.native.setWordWrap(True)
        self.delete_button.changed.connect(self.delete_selected)
        self.merge_button.changed.connect(self.merge)
        self.export_button.changed.connect(self._export_dialog)
        self.extend(
            [  # few rows: the table shares a laptop screen's height with the SAM3 panel
                row(self.delete_button, self.merge_button, self.export_button),
                self.target,
                row(self.overwrite, self.export_overwrite),
                self.status,
            ]
        )
        self.native.layout().insertWidget(0, self.table)
        self.native.layout().insertWidget(0, self.only.native)
        self._watched: list = []
        events = napari_viewer.layers.events
        for event in (events.inserted, events.removed, events.moved, events.reordered):
            event.connect(self._layers_changed)
        self._layers_changed()

    # -- content ------------------------------------------------------------------------------
    def _layers_changed(self, *_args) -> None:
        for layer in self._watched:
            for event in (layer.events.features, layer.events.name):
                try:
                    event.disconnect(self.refresh)
                except (TypeError, ValueError, RuntimeError):
                    pass
        self._watched = result_layers(self.viewer)
        for layer in self._watched:
            layer.events.features.connect(self.refresh)
            layer.events.name.connect(self.refresh)
        self.reset_choices()
        self.only.reset_choices()  # not one of the container's widgets: above the table
        self.refresh()

    def refresh(self, *_args) -> None:
        from qtpy.QtCore import Qt
        from qtpy.QtWidgets import QTableWidgetItem

        shown = self.only.value
        self.rows = table_rows(self.viewer, None if shown in (None, ALL_LAYERS) else shown)
        table = self.table
        table.setSortingEnabled(False)
        table.setRowCount(len(self.rows))
        for r, values in enumerate(self.rows.itertuples(index=False)):
            for c, value in enumerate(values):
                if isinstance(value, float | np.floating):
                    item = _number_item(float(value), round(float(value), 4))
                elif isinstance(value, int | np.integer):
                    item = _number_item(int(value), int(value))
                else:
                    item = QTableWidgetItem()
                    item.setText(str(value))
                item.setData(Qt.ItemDataRole.UserRole, r)
                table.setItem(r, c, item)
        table.setSortingEnabled(True)
        deleted = self.rows["image"].str.contains("deleted").any() if len(self.rows) else False
        if deleted:
            self.status.value = "some results lost their image layer: they are kept (see Image)"

    def _show_choices(self, _widget=None) -> list[str]:
        return [ALL_LAYERS, *(layer.name for layer in result_layers(self.viewer))]

    def shown_rows(self) -> pd.DataFrame:
        """The rows in the order the table shows them now (after sorting)."""
        from qtpy.QtCore import Qt

        order = [
            self.table.item(r, 0).data(Qt.ItemDataRole.UserRole)
            for r in range(self.table.rowCount())
        ]
        return self.rows.iloc[order].reset_index(drop=True)

    def selected_rows(self) -> pd.DataFrame:
        from qtpy.QtCore import Qt

        picked = sorted(
            {
                self.table.item(index.row(), 0).data(Qt.ItemDataRole.UserRole)
                for index in self.table.selectionModel().selectedRows()
            }
        )
        return self.rows.iloc[picked].reset_index(drop=True)

    def select(self, layer_name: str, index: int) -> None:
        """Select the table row of object `index` of `layer_name` (as a click does)."""
        for r in range(self.table.rowCount()):
            if (
                self.table.item(r, 0).text() == layer_name
                and int(self.table.item(r, 1).text()) == index
            ):
                self.table.selectRow(r)
                return
        raise UnknownKey(f"no object {index} of {layer_name} in the table")

    # -- actions ------------------------------------------------------------------------------
    def _selection_changed(self) -> None:
        """Select the last clicked object in its layer and zoom the canvas to it."""
        picked = self.selected_rows()
        if not len(picked):
            return
        name, index = picked["layer"].iloc[-1], int(picked["index"].iloc[-1])
        layer = self.viewer.layers[name]
        layer.selected_label = index
        rr, cc = np.nonzero(np.asarray(layer.data) == index)
        if rr.size == 0:
            return
        corners = [layer.data_to_world(p) for p in ((rr.min(), cc.min()), (rr.max(), cc.max()))]
        (y0, x0), (y1, x1) = np.asarray(corners)[:, -2:].min(0), np.asarray(corners)[:, -2:].max(0)
        self.viewer.layers.selection.active = layer
        self.viewer.camera.center = ((y0 + y1) / 2, (x0 + x1) / 2)
        canvas = _layers._canvas_size(self.viewer)
        if canvas is not None:
            span = max(y1 - y0, x1 - x0, 1e-9) * 1.5
            self.viewer.camera.zoom = min(canvas) / span
        self.status.value = f"{name}: label {index}"

    def _report(self, what: str, error: BaseException) -> None:
        self.last_error = error
        self.status.value = notify_error(what, error)

    def delete_selected(self, *_args) -> None:
        try:
            picked = self.selected_rows()
            if not len(picked):
                raise InvalidInput("select the rows of the objects to delete")
            total = 0
            for name, part in picked.groupby("layer", sort=False):
                total += len(part)
                delete_objects(self.viewer.layers[name], part["index"].tolist())
            self.last_error = None
            self.status.value = f"deleted {total} object(s) (Ctrl+Z on the layer undoes the pixels)"
        except Exception as error:  # noqa: BLE001 - shown to the analyst
            self._report("Delete failed", error)

    def merge(self, *_args) -> None:
        """Merge the selected rows (or, with none selected, every row) into the target."""
        try:
            target = self.target.value
            if target is None:
                raise InvalidInput("choose your labels layer under 'Merge into'")
            picked = self.selected_rows()
            if not len(picked):
                picked = self.rows
            if not len(picked):
                raise InvalidInput("no results to merge")
            new_ids: list[int] = []
            for name, part in picked.groupby("layer", sort=False):
                layer = self.viewer.layers[name]
                new_ids += merge_objects(
                    layer, part["index"].tolist(), target, self.overwrite.value
                )
            self.last_error = None
            skipped = len(picked) - len(new_ids)
            self.status.value = (
                f"merged {len(new_ids)} object(s) into '{target.name}'"
                + (f"; {skipped} lay wholly on existing labels" if skipped else "")
                + " (Ctrl+Z on that layer undoes it)"
            )
        except Exception as error:  # noqa: BLE001 - shown to the analyst
            self._report("Merge failed", error)

    def export(self, path, selection_only: bool = False) -> list[Path]:
        """Export all rows (or the selected ones) to `path`; one file per result layer when
        several layers are involved (`<stem>_<layer>.<ext>`)."""
        try:
            picked = self.selected_rows() if selection_only else self.rows
            if not len(picked):
                raise InvalidInput("no objects to export")
            path = Path(path)
            groups = list(picked.groupby("layer", sort=False))
            written = []
            for name, part in groups:
                target = path
                if len(groups) > 1:
                    safe = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")
                    target = path.with_name(f"{path.stem}_{safe}{path.suffix}")
                written.append(
                    export_objects(
                        self.viewer.layers[name],
                        target,
                        part["index"].tolist(),
                        overwrite=bool(self.export_overwrite.value),
                    )
                )
            self.last_error = None
            self.status.value = (
                f"exported {len(picked)} object(s) to {', '.join(p.name for p in written)}"
            )
            return written
        except Exception as error:  # noqa: BLE001 - shown to the analyst
            self._report("Export failed", error)
            return []

    def _export_dialog(self, *_args) -> None:
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getSaveFileName(self.native, "Export objects", "", EXPORT_FILTER)
        if path:
            self.export(path, selection_only=bool(len(self.selected_rows())))


__all__ = [
    "ResultsTable",
    "delete_objects",
    "export_objects",
    "merge_objects",
    "table_rows",
]

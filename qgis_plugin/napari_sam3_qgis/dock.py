"""The SAM3 dock beside the map: connection, raster, point and box tools with ranked candidates,
keywords in view, exemplars from selected features, and the results with a score filter,
Accept and Export. UI only: the prompts live in prompts.py, the layers in results.py, the
canvas's geometry in canvas.py, and the model in the engine (engine.py, napari-sam3's Python).
"""

from __future__ import annotations

from pathlib import Path

from qgis.core import (
    Qgis,
    QgsCoordinateReferenceSystem,
    QgsMapLayerProxyModel,
    QgsProject,
    QgsSettings,
)
from qgis.gui import QgsMapLayerComboBox
from qgis.PyQt.QtCore import Qt, QTimer
from qgis.PyQt.QtWidgets import (
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from . import results, view
from .engine import EngineCancelled
from .map_tools import BoxTool, PointTool
from .prompts import Prompts
from .results import DockError
from .runner import remember_connection, remembered_connection

PRECISION_KEY = "napari-sam3/dock/precision"
# keywords and exemplars: the engine returns everything scoring at least this; the slider
# filters above it without another model run
SCORE_FLOOR = 0.05
POLL_MS = 100  # progress and the engine's messages while a job runs


def connection_spec(text: str, precision: str) -> dict:
    """The connection line -> the ConnectionSpec fields the engine takes: an existing folder is
    a model repository (run in-process), anything else Triton server(s) host:port[,...]."""
    text = text.strip()
    if not text:
        raise DockError(
            "give the model repository folder or the Triton server(s) host:port in the dock's "
            "connection line"
        )
    if Path(text).expanduser().is_dir():
        spec = {"repository": str(Path(text).expanduser())}
        if precision != "auto":
            spec["precision"] = precision
        return spec
    return {"servers": text}


class Sam3Dock(QDockWidget):
    """The dock; `canvas` and `bar` are QGIS's (iface.mapCanvas(), iface.messageBar()),
    `engine` () -> the session's engine (engine.shared)."""

    def __init__(self, canvas, bar, engine, parent=None) -> None:
        super().__init__("SAM3", parent)
        self.setObjectName("napari_sam3_dock")
        self.canvas, self.bar, self._engine = canvas, bar, engine
        self.prompts = Prompts()
        self.exemplars: list[list] = []
        self._connected: dict | None = None
        self._opened: dict | None = None  # {"layer": id, "image": key, "crs": ..., ...}
        self._layers: dict[str, object] = {}  # raster layer id -> its results layer
        self._object: int | None = None  # the results feature of the object being drawn
        self._job = None
        self._progress = None
        self._handlers = None
        self._said = 0
        self._done = None
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)
        self._build()
        self.point_tool = PointTool(canvas, self._raster_crs)
        self.box_tool = BoxTool(canvas, self._raster_crs)
        for tool in (self.point_tool, self.box_tool):
            tool.command.connect(self.command)
        self.point_tool.clicked.connect(self.add_point)
        self.box_tool.boxed.connect(self.set_box)

    # -- layout ------------------------------------------------------------------------------
    def _build(self) -> None:
        settings = QgsSettings()
        body = QWidget()
        column = QVBoxLayout(body)
        form = QFormLayout()
        self.connection = QLineEdit(remembered_connection())
        self.connection.setPlaceholderText("model folder, or Triton host:port[,host:port]")
        self.connection.setToolTip(
            "An exported model repository (runs in napari-sam3's Python, the Processing "
            "provider's), or Triton server addresses"
        )
        self.precision = QComboBox()
        self.precision.addItems(["auto", "fp32", "bf16"])
        self.precision.setCurrentText(str(settings.value(PRECISION_KEY, "auto") or "auto"))
        self.raster = QgsMapLayerComboBox()
        self.raster.setFilters(QgsMapLayerProxyModel.RasterLayer)
        form.addRow("Model", self.connection)
        form.addRow("Precision", self.precision)
        form.addRow("Raster", self.raster)
        column.addLayout(form)

        tools = QGroupBox("Click and box")
        grid = QGridLayout(tools)
        self.point_button = _button("Point (P)", "Click: positive; Shift-click: negative")
        self.box_button = _button("Box (B)", "Drag a box around the object")
        for b in (self.point_button, self.box_button):
            b.setCheckable(True)
        self.undo_button = _button("Undo", "Remove the last point or box (Backspace)")
        self.reset_button = _button("Reset", "Drop the object being drawn (Esc)")
        self.cycle_button = _button("Next (Tab)", "The next of the three ranked candidates")
        self.keep_button = _button("Keep (Enter)", "Keep this object and start the next one")
        for i, b in enumerate((self.point_button, self.box_button, self.undo_button,
                               self.reset_button, self.cycle_button, self.keep_button)):  # fmt: skip
            grid.addWidget(b, i // 2, i % 2)
        self.candidate_label = QLabel("no candidate")
        grid.addWidget(self.candidate_label, 3, 0, 1, 2)
        column.addWidget(tools)
        self.point_button.clicked.connect(lambda: self.command("point"))
        self.box_button.clicked.connect(lambda: self.command("box"))
        self.undo_button.clicked.connect(lambda: self.command("undo"))
        self.reset_button.clicked.connect(lambda: self.command("reset"))
        self.cycle_button.clicked.connect(lambda: self.command("cycle"))
        self.keep_button.clicked.connect(lambda: self.command("keep"))

        find = QGroupBox("Keywords and exemplars")
        form = QFormLayout(find)
        self.keywords = QLineEdit()
        self.keywords.setPlaceholderText("building, pool")
        self.scope = QComboBox()
        self.scope.addItems(["Current view", "Whole layer"])
        self.gsd = QDoubleSpinBox()
        self.gsd.setRange(0, 1000)
        self.gsd.setDecimals(2)
        self.gsd.setSuffix(" m")
        self.gsd.setSpecialValueText("canvas resolution")
        self.exemplar_layer = _polygon_layers()
        row = QHBoxLayout()
        self.add_positive = _button("+ selected", "The layer's selected polygons as positives")
        self.add_negative = _button("− selected", "The layer's selected polygons as negatives")
        self.clear_exemplars = _button("Clear", "Forget the exemplars")
        for b in (self.add_positive, self.add_negative, self.clear_exemplars):
            row.addWidget(b)
        self.exemplar_label = QLabel("no exemplars")
        self.segment_button = _button("Segment", "Keywords and exemplars over the view or layer")
        form.addRow("Keywords", self.keywords)
        form.addRow("Where", self.scope)
        form.addRow("GSD", self.gsd)
        form.addRow("Exemplars", self.exemplar_layer)
        form.addRow(row)
        form.addRow(self.exemplar_label)
        form.addRow(self.segment_button)
        column.addWidget(find)
        self.add_positive.clicked.connect(lambda: self.add_exemplars(True))
        self.add_negative.clicked.connect(lambda: self.add_exemplars(False))
        self.clear_exemplars.clicked.connect(self.forget_exemplars)
        self.segment_button.clicked.connect(self.segment)
        self.keywords.returnPressed.connect(self.segment)

        kept = QGroupBox("Results")
        form = QFormLayout(kept)
        self.score = QSlider(Qt.Horizontal)
        self.score.setRange(0, 100)
        self.score_label = QLabel("score ≥ 0.00")
        self.count_label = QLabel("0 polygons")
        self.target = _polygon_layers()
        row = QHBoxLayout()
        self.accept_button = _button("Accept (Ctrl+Enter)", "Add the kept polygons to the layer")
        self.export_button = _button("Export…", "Write the kept polygons to a new file")
        row.addWidget(self.accept_button)
        row.addWidget(self.export_button)
        form.addRow(self.score_label, self.score)
        form.addRow(self.count_label)
        form.addRow("Into", self.target)
        form.addRow(row)
        column.addWidget(kept)
        column.addStretch(1)
        self.score.valueChanged.connect(self.filter)
        self.accept_button.clicked.connect(lambda: self.command("accept"))
        self.export_button.clicked.connect(self.export)

        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setWidget(scroll)
        # wide enough for its content (never cut: no horizontal scroll bar), tall as QGIS allows
        margin = scroll.verticalScrollBar().sizeHint().width() + 2 * scroll.frameWidth()
        scroll.setMinimumWidth(body.minimumSizeHint().width() + margin)
        self.raster.layerChanged.connect(self._other_raster)
        self.connection.editingFinished.connect(self._remember)
        self.precision.currentTextChanged.connect(self._remember)

    def _other_raster(self, *_) -> None:
        """The object being drawn belongs to the raster it was drawn on: kept there as it is."""
        self._object = None
        self.prompts.reset()
        self._show_candidate()
        self.filter()

    def _remember(self) -> None:
        settings = QgsSettings()
        remember_connection(self.connection.text())
        settings.setValue(PRECISION_KEY, self.precision.currentText())

    # -- commands (buttons and the tools' keys) ----------------------------------------------
    def command(self, name: str) -> None:
        try:
            getattr(self, "_do_" + name.replace("-", "_"))()
        except DockError as error:
            self.say(str(error))

    def _do_point(self) -> None:
        self.canvas.setMapTool(self.point_tool)
        self.point_button.setChecked(True)
        self.box_button.setChecked(False)

    def _do_box(self) -> None:
        self.canvas.setMapTool(self.box_tool)
        self.box_button.setChecked(True)
        self.point_button.setChecked(False)

    def _do_no_raster(self) -> None:
        raise DockError("choose the raster layer to segment in the SAM3 dock")

    def _do_undo(self) -> None:
        if not self.prompts.undo():
            return
        if self.prompts:
            self._click()
        else:
            self._do_reset()

    def _do_reset(self) -> None:
        self._drop_object()
        self.prompts.reset()
        self._show_candidate()

    def _do_keep(self) -> None:
        self._object = None
        self.prompts.reset()
        self._show_candidate()

    def _do_cycle(self) -> None:
        if self._busy():
            return
        chosen = self.prompts.cycle()
        if chosen is None:
            return
        if "wkt" in chosen:
            self._put_candidate()
            return

        def filled(result: dict) -> None:
            self.prompts.fill(result)
            self._put_candidate()

        def refused(message: str) -> None:
            self.prompts.back()
            self.say(message)

        params = {"token": self.prompts.token, "index": chosen["index"]}
        self._call("candidate", params, filled, refused)

    def _do_accept(self) -> None:
        layer = self.results_layer()
        if layer is None:
            raise DockError("nothing to accept yet: click, box or segment first")
        count = results.accept(layer, self.target.currentLayer())
        self._object = None
        self.prompts.reset()
        self._show_candidate()
        self.say(
            f"{count} polygon(s) added to {self.target.currentLayer().name()} "
            "(undo with the layer's Undo; save its edits to keep them)",
            Qgis.Success,
        )

    # -- clicks and boxes --------------------------------------------------------------------
    def add_point(self, x: float, y: float, positive: bool) -> None:
        if self._busy():
            return
        self.prompts.add_point(x, y, positive)
        self._click()

    def set_box(self, xmin: float, ymin: float, xmax: float, ymax: float) -> None:
        if self._busy():
            return
        self.prompts.set_box(xmin, ymin, xmax, ymax)
        self._click()

    def _click(self) -> None:
        def ask() -> None:
            self._call(
                "click", self.prompts.request(self._opened["image"]), self._clicked, self._refused
            )

        self._ready(ask, self._refused)

    def _clicked(self, result: dict) -> None:
        self.prompts.answered(result["candidates"], result.get("token"), result.get("window"))
        if self.prompts.current() is None:
            self._drop_object()
            self.say("no object there: add a point or draw a box", Qgis.Info)
        else:
            self._put_candidate()

    def _refused(self, message: str) -> None:
        self.prompts.undo()  # the prompt the engine refused is not kept
        self.say(message)

    def _put_candidate(self) -> None:
        layer = self._results_for_open()
        prompt = "box" if self.prompts.box is not None else "point"
        feature = results.feature(
            layer, self.prompts.current(), prompt, self._opened["source"], self._model()
        )
        self._object = results.replace(layer, self._object, feature)
        self._show_candidate()
        self.filter()

    def _drop_object(self) -> None:
        layer = self.results_layer()
        if self._object is not None and layer is not None:
            results.remove(layer, [self._object])
        self._object = None
        self.filter()

    def _show_candidate(self) -> None:
        current = self.prompts.current()
        if current is None:
            self.candidate_label.setText("no candidate")
        else:
            self.candidate_label.setText(
                f"candidate {self.prompts.chosen + 1} of {len(self.prompts.candidates)}, "
                f"score {current['score']:.2f}"
            )

    # -- keywords and exemplars --------------------------------------------------------------
    def add_exemplars(self, positive: bool) -> None:
        crs = self._raster_crs()
        if crs is None:
            self.say("choose the raster layer to segment in the SAM3 dock")
            return
        try:
            self.exemplars += view.exemplar_boxes(self.exemplar_layer.currentLayer(), crs, positive)
        except DockError as error:
            self.say(str(error))
        self._show_exemplars()

    def forget_exemplars(self) -> None:
        self.exemplars = []
        self._show_exemplars()

    def _show_exemplars(self) -> None:
        positive = sum(1 for e in self.exemplars if e[4])
        negative = len(self.exemplars) - positive
        self.exemplar_label.setText(
            f"{positive} positive, {negative} negative" if self.exemplars else "no exemplars"
        )

    def segment(self) -> None:
        if self._busy():
            return
        text = self.keywords.text().strip()
        if not text and not self.exemplars:
            self.say("type keywords (e.g. building, pool) or add selected polygons as exemplars")
            return

        def ask() -> None:
            crs = self._crs_of_open()
            in_view = self.scope.currentIndex() == 0
            params = {
                "image": self._opened["image"],
                "keywords": text or None,  # as typed: the engine splits it (the library's rule)
                "exemplars": list(self.exemplars) or None,
                "extent": view.view_extent(self.canvas, crs) if in_view else None,
                "gsd": self._gsd(in_view, crs),
                "score_thr": SCORE_FLOOR,
                "dedup": None,
            }
            prompt = "keywords" if text else "exemplars"
            self._call(
                "segment", params, lambda r: self._segmented(r, prompt), self.say, progress=True
            )

        self._ready(ask, self.say)

    def _gsd(self, in_view: bool, crs) -> float | None:
        """The chosen GSD; else in view the canvas's resolution, never finer than the raster's
        (None: native)."""
        if self.gsd.value() > 0:
            return float(self.gsd.value())
        if not in_view:
            return None
        canvas = view.view_gsd(self.canvas)
        native = view.native_gsd(self._opened["transform"], crs)
        return canvas if canvas > native * 1.01 else None

    def _segmented(self, result: dict, prompt: str) -> None:
        layer = self._results_for_open()
        rows = result["features"]
        model, source = self._model(), self._opened["source"]
        results.add(layer, [results.feature(layer, r, prompt, source, model) for r in rows])
        count = self.filter()
        self.say(f"{len(rows)} found; {count} shown at this score", Qgis.Info)

    # -- results -----------------------------------------------------------------------------
    def results_layer(self):
        layer = self.raster.currentLayer()
        results_layer = None if layer is None else self._layers.get(layer.id())
        return results_layer if results_layer is not None and _alive(results_layer) else None

    def filter(self, *_) -> int:
        minimum = self.score.value() / 100.0
        self.score_label.setText(f"score ≥ {minimum:.2f}")
        layer = self.results_layer()
        count = 0 if layer is None else results.filter_score(layer, minimum)
        self.count_label.setText(f"{count} polygon(s)")
        return count

    def export(self, path: str | None = None) -> str | None:
        layer = self.results_layer()
        if layer is None:
            self.say("nothing to export yet: click, box or segment first")
            return None
        if not path:
            path, _ = QFileDialog.getSaveFileName(
                self, "Export SAM3 polygons", "", "GeoPackage (*.gpkg);;GeoJSON (*.geojson);;"
                "FlatGeobuf (*.fgb);;Shapefile (*.shp)",
                options=QFileDialog.DontConfirmOverwrite,
            )  # fmt: skip
            if not path:
                return None
        try:
            written = results.export(layer, path)
        except DockError as error:
            self.say(str(error))
            return None
        self.say(f"{layer.featureCount()} polygon(s) written to {written}", Qgis.Success)
        return written

    def _results_for_open(self):
        layer_id = self._opened["layer"]
        layer = self._layers.get(layer_id)
        if layer is None or not _alive(layer):
            name = f"SAM3 – {self.raster.currentLayer().name()}"
            layer = results.new_layer(self._opened["crs"], name)
            QgsProject.instance().addMapLayer(layer)
            self._layers[layer_id] = layer
        return layer

    # -- the engine --------------------------------------------------------------------------
    def _raster_crs(self):
        layer = self.raster.currentLayer()
        if layer is None:
            return None
        if self._opened and self._opened["layer"] == layer.id():
            return self._crs_of_open()
        return layer.crs()

    def _crs_of_open(self):
        return QgsCoordinateReferenceSystem.fromWkt(self._opened["crs"])

    def _model(self) -> str:
        return (self._connected or {}).get("model", "")

    def _ready(self, then, refused) -> None:
        """connect (once per connection line), open (once per raster), then `then()`."""
        layer = self.raster.currentLayer()
        if layer is None:
            refused("choose the raster layer to segment in the SAM3 dock")
            return
        try:
            spec = connection_spec(self.connection.text(), self.precision.currentText())
        except DockError as error:
            refused(str(error))
            return
        self._remember()
        if self._connected is None or self._connected["spec"] != spec:

            def connected(result: dict) -> None:
                self._connected = {"spec": spec, **result}
                self._opened = None
                self._ready(then, refused)

            self._call("connect", {"connection": spec}, connected, refused,
                       message="loading the model")  # fmt: skip
            return
        if self._opened is None or self._opened["layer"] != layer.id():
            path = layer.source().split("|")[0]

            def opened(result: dict) -> None:
                self._opened = {"layer": layer.id(), "source": Path(path).name, **result}
                then()

            self._call("open", {"raster": path, "bands": None}, opened, refused)
            return
        then()

    def _busy(self) -> bool:
        if self._job is not None:
            self.say("SAM3 is still working: wait, or cancel it in the message bar", Qgis.Info)
            return True
        return False

    def _call(self, action, params, done, refused, progress=False, message=None) -> None:
        """Send a request; `done(result)` or `refused(message)` later on QGIS's thread. While it
        runs the message bar shows progress and a Cancel button."""
        try:
            self._job = self._engine().request_async(action, params)
        except Exception as error:  # noqa: BLE001 - shown to the analyst, not raised
            refused(str(error))
            return
        self._handlers = (done, refused)
        self._said = 0
        # the answer is taken as soon as it comes (queued to this thread); the timer shows progress
        self._job.signals.finished.connect(self._poll)
        if progress or message:
            self._show_progress(message or f"SAM3: {action}")
        self._timer.start()

    def _poll(self) -> None:
        job = self._job
        if job is None:
            self._timer.stop()
            return
        if self._progress is not None:
            self._progress.setValue(int(100 * job.progress))
        for kind, text in job.messages[self._said :]:  # the engine's own (a restart, ...)
            self.say(text, Qgis.Warning if kind == "warning" else Qgis.Info)
        self._said = len(job.messages)
        if not job.done:
            return
        self._timer.stop()
        # held until the next job: its Qt signals object then goes on this thread, not the
        # request's (a QObject freed on a plain Python thread warned, and risked a crash)
        self._done, self._job = job, None
        self._hide_progress()
        on_result, on_refusal = self._handlers
        try:
            result = job.result()
        except EngineCancelled:
            self.say("cancelled: nothing was added", Qgis.Info)
            return
        except Exception as error:  # noqa: BLE001 - refused or failed: the engine's message
            on_refusal(str(error))
            return
        try:
            on_result(result)
        except DockError as error:
            self.say(str(error))

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()

    def _show_progress(self, text: str) -> None:
        item = self.bar.createMessage("SAM3", text)
        bar = QProgressBar()
        bar.setRange(0, 100)
        stop = QPushButton("Cancel")
        stop.clicked.connect(self.cancel)
        item.layout().addWidget(bar)
        item.layout().addWidget(stop)
        self._progress, self._progress_item = bar, item
        self.bar.pushWidget(item, Qgis.Info)

    def _hide_progress(self) -> None:
        if self._progress is not None:
            self.bar.popWidget(self._progress_item)
            self._progress = self._progress_item = None

    def say(self, text: str, level=Qgis.Warning) -> None:
        self.bar.pushMessage("SAM3", text, level=level, duration=0 if level >= Qgis.Warning else 5)

    def unload(self) -> None:
        """Before the plugin goes: its tools off the canvas, no job left running."""
        self.cancel()
        self._timer.stop()
        for tool in (self.point_tool, self.box_tool):
            if self.canvas.mapTool() is tool:
                self.canvas.unsetMapTool(tool)


def _polygon_layers() -> QgsMapLayerComboBox:
    """A choice of the project's polygon layers, none chosen at first."""
    box = QgsMapLayerComboBox()
    box.setFilters(QgsMapLayerProxyModel.PolygonLayer)
    box.setAllowEmptyLayer(True)
    box.setLayer(None)
    return box


def _button(text: str, tip: str) -> QPushButton:
    button = QPushButton(text)
    button.setToolTip(tip)
    return button


def _alive(layer) -> bool:
    try:
        return QgsProject.instance().mapLayer(layer.id()) is not None
    except RuntimeError:  # deleted by QGIS (the analyst removed it)
        return False

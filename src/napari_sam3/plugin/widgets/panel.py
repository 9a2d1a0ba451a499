"""The SAM3 panel: one dock widget for every mode, with one set of inputs they all share.

It fits a laptop screen (1366 x 768): everything sits in a scroll area, so the panel never makes
napari's window grow past the screen. Top to bottom: a one-line connection status with a button
to change it (the connection form shows while not connected, and folds away once connected), ONE
image (a scene: its band layers together) / bands / stretch / where (whole image, current view,
selected region) picker, ONE exemplar layer, the thresholds and dedup in a collapsed "Advanced"
section, then the modes as tabs, each as tall as its own fields: Text & exemplars (any number of
keywords), Concepts, Interactive, Scene (the whole scene, tiled) and Change (two dates). Each mode is the widget class
of its own module, built with `shared=panel` so it reads the panel's fields instead of its own.
"""

from __future__ import annotations

from magicgui.widgets import ComboBox, Container, FloatSpinBox, PushButton
from napari.layers import Shapes

from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import (
    STATE,
    Sam3Widget,
    layer_combo,
    notify_error,
    row,
    scene_combo,
    summary_line,
)
from napari_sam3.plugin.widgets._fields import (
    REGION,
    VIEW,
    WHOLE,
    add_exemplar_fields,
    add_threshold_fields,
    bands_field,
    prefill_bands,
)
from napari_sam3.plugin.widgets.change import ChangeWidget
from napari_sam3.plugin.widgets.concepts import ConceptsWidget
from napari_sam3.plugin.widgets.connection import ConnectionWidget
from napari_sam3.plugin.widgets.interactive import InteractiveWidget, shortcut_help
from napari_sam3.plugin.widgets.scene import SceneWidget
from napari_sam3.plugin.widgets.text import TextWidget

TABS = ("Text & exemplars", "Concepts", "Interactive", "Scene", "Change")
# The button that runs each tab's mode (what must be reachable on any screen).
RUN_BUTTONS = {
    "Text & exemplars": "run_button",
    "Concepts": "apply_button",
    "Interactive": "start_button",
    "Scene": "run_button",
    "Change": "run_button",
}
ADVANCED = "Advanced: thresholds, detections, dedup"
CHANGE, HIDE = "Change…", "Hide"
STRETCH_TIP = (
    "Percentiles of the scene's valid pixels shown as black and white: the contrast limits of "
    "its band layers and the stretch the model is given, changed together"
)


class Sam3Panel(Sam3Widget):
    """Connection, shared inputs and the SAM3 modes as tabs, in a scroll area."""

    def __init__(self, napari_viewer) -> None:
        from qtpy.QtWidgets import QComboBox, QHBoxLayout, QVBoxLayout, QWidget
        from superqt import QCollapsible, QElidingLabel

        super().__init__(napari_viewer)
        viewer = napari_viewer
        # napari docks `.native`: the scroll area goes inside it (magicgui's own `scrollable`
        # wraps `.native` from outside, which napari does not dock).
        self.content = QWidget()
        self.scroll = _vertical_scroll()
        self.scroll.setWidget(self.content)
        self.native.layout().addWidget(self.scroll)
        self.native.layout().setContentsMargins(0, 0, 0, 0)

        # -- connection: one line (and a button) once connected, the form while not ----------
        self.connection = ConnectionWidget(viewer)
        self.connection.model.visible = False  # the panel's summary line says it
        self.summary = QElidingLabel()
        self.change_button = PushButton(text=CHANGE, tooltip="Show or hide the connection form")
        self.change_button.changed.connect(self._toggle_connection)
        self.summary_row = QWidget()
        line = QHBoxLayout(self.summary_row)
        line.setContentsMargins(4, 2, 4, 2)
        line.addWidget(self.summary, 1)
        line.addWidget(self.change_button.native)

        # -- the inputs every mode shares ----------------------------------------------------
        self.image = scene_combo(
            viewer,
            tooltip="The scene the modes send to the model (the band layers read from one "
            "raster are one scene); selecting a band layer in the layer list chooses its scene",
        )
        self.bands = bands_field()
        prefill_bands(viewer, self.image, self.bands)
        self.stretch_low = FloatSpinBox(value=2.0, min=0.0, max=49.5, step=0.5, tooltip=STRETCH_TIP)
        self.stretch_high = FloatSpinBox(
            value=98.0, min=50.5, max=100.0, step=0.5, tooltip=STRETCH_TIP
        )
        self.stretch = row(self.stretch_low, self.stretch_high, label="Stretch (%)")
        self.where = ComboBox(
            choices=[WHOLE, VIEW, REGION],
            value=WHOLE,
            label="Where",
            tooltip="What the modes send to the model: the whole image, what the canvas shows "
            "now, or the last rectangle on the Region layer (the Scene tab: the whole scene, "
            "tiled, or with Selected region only the tiles touching the region)",
        )
        self.region = layer_combo(
            viewer,
            Shapes,
            "Region",
            nullable=True,
            tooltip="A Shapes layer whose last rectangle is the region (Where: Selected region)",
        )
        exemplar_fields = add_exemplar_fields(self, viewer)
        self.inputs = Container(
            widgets=[
                self.image,
                self.bands,
                self.stretch,
                self.where,
                self.region,
                *exemplar_fields,
            ],
            labels=True,
        )
        self.thresholds = Container(widgets=add_threshold_fields(self), labels=True)
        self.advanced = QCollapsible(ADVANCED)
        self.advanced.addWidget(self.thresholds.native)

        # -- the modes -----------------------------------------------------------------------
        self.text = TextWidget(viewer, shared=self)
        self.concepts = ConceptsWidget(viewer, shared=self)
        self.interactive = InteractiveWidget(viewer, shared=self)
        self.scene = SceneWidget(viewer, shared=self)
        self.change = ChangeWidget(viewer, shared=self)
        self.modes = [self.text, self.concepts, self.interactive, self.scene, self.change]
        self.tabs = _fitting_tabs()
        for title, mode in zip(TABS, self.modes, strict=True):
            mode.model.visible = False
            self.tabs.addTab(mode.native, title.replace("&", "&&"))  # Qt: & is a mnemonic
        self.tabs.setTabToolTip(TABS.index("Interactive"), shortcut_help())
        self.tabs.currentChanged.connect(self._fit_tab)
        self._fit_tab(0)

        layout = QVBoxLayout(self.content)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(2)
        for part in (self.inputs, self.thresholds, *self.modes):
            part.margins = (4, 2, 4, 2)
            part.native.layout().setSpacing(3)
        for widget in (
            self.summary_row,
            self.connection.native,
            self.inputs.native,
            self.advanced,
            self.tabs,
        ):
            layout.addWidget(widget)
        layout.addStretch(1)
        # Drop-downs as narrow as the panel allows (a long layer name is cut, not the canvas).
        for combo in self.content.findChildren(QComboBox):
            if self.connection.native.isAncestorOf(combo):  # short fixed choices
                continue
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(12)

        self.image.changed.connect(self._image_changed)
        self.where.changed.connect(self._where_changed)
        self.stretch_low.changed.connect(self._stretch_changed)
        self.stretch_high.changed.connect(self._stretch_changed)
        self._connection_shown = True
        self._client_changed(STATE.client)
        self.reset_choices()
        self._image_changed()
        self._where_changed()

    # -- connection ---------------------------------------------------------------------------
    def _toggle_connection(self, *_args) -> None:
        self._show_connection(not self._connection_shown)

    def _show_connection(self, shown: bool) -> None:
        self._connection_shown = shown
        self.connection.visible = shown
        self.change_button.text = HIDE if shown else CHANGE

    def _client_changed(self, client) -> None:
        super()._client_changed(client)
        if hasattr(self, "connection"):
            text, details = summary_line(client)
            self.summary.setText(text)
            self.summary.setToolTip(details)
            # Not connected: the connection form shows; connected: folded into the one line.
            self._show_connection(client is None)

    # -- inputs -------------------------------------------------------------------------------
    def _image_changed(self, *_args) -> None:
        """Show the chosen scene's stretch (the percentiles its layers were stretched at)."""
        layer = self.image.value
        percentiles = None if layer is None else _layers.stretch_percentiles(layer)
        self.stretch.enabled = percentiles is not None
        if percentiles is not None:
            with self.stretch_low.changed.blocked(), self.stretch_high.changed.blocked():
                self.stretch_low.value, self.stretch_high.value = percentiles

    def _stretch_changed(self, *_args) -> None:
        layer = self.image.value
        if layer is None or _layers.stretch_percentiles(layer) is None:
            return
        percentiles = (float(self.stretch_low.value), float(self.stretch_high.value))
        try:
            changed = _layers.set_stretch(self.viewer, layer, percentiles)
        except Exception as error:  # noqa: BLE001 - shown to the analyst
            self.last_error = error
            self.status.value = notify_error("Stretch failed", error)
            return
        self.last_error = None
        self.status.value = (
            f"{len(changed)} band layer(s) and the model's input stretched at "
            f"{percentiles[0]:g}-{percentiles[1]:g} %"
        )

    def _where_changed(self, *_args) -> None:
        self.region.visible = self.where.value == REGION

    # -- tabs ---------------------------------------------------------------------------------
    def _fit_tab(self, index: int) -> None:
        """Make the tabs as tall as the page shown (a QTabWidget is as tall as its tallest)."""
        from qtpy.QtWidgets import QSizePolicy

        policy = QSizePolicy.Policy
        for i in range(self.tabs.count()):
            page = self.tabs.widget(i)
            vertical = policy.Preferred if i == index else policy.Ignored
            page.setSizePolicy(policy.Preferred, vertical)
        self.tabs.updateGeometry()

    def mode(self, title: str) -> Sam3Widget:
        """Show the tab `title` (one of TABS) and return its mode widget."""
        index = TABS.index(title)
        self.tabs.setCurrentIndex(index)
        return self.modes[index]

    def run_button(self, title: str) -> PushButton:
        """The button that runs the mode of tab `title`."""
        return getattr(self.modes[TABS.index(title)], RUN_BUTTONS[title])

    def reset_choices(self, *_args) -> None:
        super().reset_choices()
        for part in ("inputs", "thresholds"):
            if hasattr(self, part):
                getattr(self, part).reset_choices()
        for mode in getattr(self, "modes", ()):
            mode.reset_choices()

    @property
    def running(self) -> bool:
        return any(mode.job.running for mode in self.modes) or self.connection.job.running

    def _removed(self) -> None:
        for mode in [*self.modes, self.connection]:
            mode._removed()
        super()._removed()

    def close(self) -> None:
        for mode in self.modes:
            mode.close()
        super().close()


def _fitting_tabs():
    """A QTabWidget as tall as the page it shows (Qt's is as tall as its tallest page); the
    pages not shown have an Ignored vertical size policy (`Sam3Panel._fit_tab`)."""
    from qtpy.QtWidgets import QTabWidget

    class FittingTabs(QTabWidget):
        def sizeHint(self):  # noqa: N802 - Qt's name
            hint = super().sizeHint()
            page = self.currentWidget()
            if page is not None:
                frame = super().minimumSizeHint().height() - page.minimumSizeHint().height()
                hint.setHeight(page.sizeHint().height() + frame)
            return hint

    return FittingTabs()


def _vertical_scroll():
    """A scroll area that scrolls up and down only: never narrower than the widest row of its
    content (no horizontal scrolling, nothing cut at the right), any height."""
    from qtpy.QtCore import QEvent, Qt
    from qtpy.QtWidgets import QFrame, QScrollArea

    class VerticalScroll(QScrollArea):
        def __init__(self) -> None:
            super().__init__()
            self.setWidgetResizable(True)
            self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
            self.setFrameShape(QFrame.Shape.NoFrame)

        def setWidget(self, widget) -> None:  # noqa: N802 - Qt's name
            super().setWidget(widget)
            widget.installEventFilter(self)

        def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt's name
            if obj is self.widget() and event.type() == QEvent.Type.LayoutRequest:
                self.updateGeometry()  # a row shown or hidden: the width may change
            return super().eventFilter(obj, event)

        def minimumSizeHint(self):  # noqa: N802 - Qt's name
            hint = super().minimumSizeHint()
            content = self.widget()
            if content is not None:
                bar = self.verticalScrollBar().sizeHint().width()
                hint.setWidth(content.minimumSizeHint().width() + bar + 2 * self.frameWidth())
            return hint

    return VerticalScroll()

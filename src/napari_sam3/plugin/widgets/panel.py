"""The SAM3 panel: one dock widget for every mode, with one set of inputs they all share.

Top to bottom: the connection (its status line always visible, its controls folded away once
connected), ONE image / bands / where (whole image, current view, selected region) picker, ONE
exemplar layer and ONE set of thresholds, then the modes as tabs: Text & exemplars (any number of
keywords), Concepts, Interactive and Scene (the whole scene, tiled). Each mode is the widget class
of its own module, built with `shared=panel` so it reads the panel's fields instead of its own.
"""

from __future__ import annotations

from magicgui.widgets import Container, PushButton, RadioButtons
from napari.layers import Image, Shapes

from napari_sam3.plugin.widgets._common import STATE, Sam3Widget, layer_combo, row
from napari_sam3.plugin.widgets._fields import (
    REGION,
    VIEW,
    WHOLE,
    add_exemplar_fields,
    add_threshold_fields,
    bands_field,
)
from napari_sam3.plugin.widgets.concepts import ConceptsWidget
from napari_sam3.plugin.widgets.connection import ConnectionWidget
from napari_sam3.plugin.widgets.interactive import InteractiveWidget
from napari_sam3.plugin.widgets.scene import SceneWidget
from napari_sam3.plugin.widgets.text import TextWidget

TABS = ("Text & exemplars", "Concepts", "Interactive", "Scene")


class Sam3Panel(Sam3Widget):
    """Connection, shared inputs and the SAM3 modes as tabs."""

    def __init__(self, napari_viewer) -> None:
        from qtpy.QtWidgets import QTabWidget

        super().__init__(napari_viewer)
        viewer = napari_viewer
        self.connection = ConnectionWidget(viewer)
        self.connection.model.visible = False  # the panel's own model line says it
        self.connection_button = PushButton(text="Connection…")
        self.connection_button.changed.connect(self._toggle_connection)

        self.image = layer_combo(viewer, Image, "Image")
        self.bands = bands_field()
        self.where = RadioButtons(
            choices=[WHOLE, VIEW, REGION],
            value=WHOLE,
            label="Where",
            tooltip="What the modes send to the model: the whole image, what the canvas shows "
            "now, or the last rectangle on the Region layer (the Scene tab: the whole scene, "
            "tiled)",
        )
        self.region = layer_combo(
            viewer,
            Shapes,
            "Region",
            nullable=True,
            tooltip="A Shapes layer whose last rectangle is the region (Where: Selected region)",
        )
        exemplar_fields = add_exemplar_fields(self, viewer)
        threshold_fields = add_threshold_fields(self)
        self.inputs = Container(
            widgets=[
                self.image,
                self.bands,
                self.where,
                self.region,
                *exemplar_fields,
                *threshold_fields,
            ],
            labels=True,
        )

        self.text = TextWidget(viewer, shared=self)
        self.concepts = ConceptsWidget(viewer, shared=self)
        self.interactive = InteractiveWidget(viewer, shared=self)
        self.scene = SceneWidget(viewer, shared=self)
        self.modes = [self.text, self.concepts, self.interactive, self.scene]
        self.tabs = QTabWidget()
        for title, mode in zip(TABS, self.modes, strict=True):
            mode.model.visible = False
            self.tabs.addTab(mode.native, title.replace("&", "&&"))  # Qt: & is a mnemonic

        self.extend([self.model, row(self.connection_button), self.connection, self.inputs])
        self.native.layout().addWidget(self.tabs)
        self._client_changed(STATE.client)
        self.reset_choices()

    def _toggle_connection(self, *_args) -> None:
        self.connection.visible = not self.connection.visible

    def _client_changed(self, client) -> None:
        super()._client_changed(client)
        if hasattr(self, "connection"):
            # Not connected: the connection controls show; connected: folded away.
            self.connection.visible = client is None

    def reset_choices(self, *_args) -> None:
        super().reset_choices()
        for mode in getattr(self, "modes", ()):
            mode.reset_choices()

    def mode(self, title: str) -> Sam3Widget:
        """Show the tab `title` (one of TABS) and return its mode widget."""
        index = TABS.index(title)
        self.tabs.setCurrentIndex(index)
        return self.modes[index]

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

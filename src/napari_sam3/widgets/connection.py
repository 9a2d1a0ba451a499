"""Connection: choose the embedded engine (a local model repository) or a Triton server."""

from __future__ import annotations

import weakref
from pathlib import Path

from magicgui.widgets import CheckBox, Label, LineEdit, PushButton, RadioButtons

from ..settings import ConnectionSettings, load_connection, save_connection
from ._common import STATE, Sam3Widget, describe_client, reports_errors, row

EMBEDDED = "Embedded (local model repository)"
TRITON = "Triton server"
# Clients this widget made: only these are closed on Disconnect (a client a notebook handed to
# the widgets stays the notebook's).
_MADE_HERE: weakref.WeakSet = weakref.WeakSet()


def connect(settings: ConnectionSettings):
    """A `Sam3Client` for `settings` (runs in a worker: loading graphs takes a while)."""
    from ..client import Sam3Client

    if settings.engine == "embedded":
        if not settings.repository:
            raise ValueError("choose the model repository folder (written by sam3-export)")
        if not Path(settings.repository).is_dir():
            raise FileNotFoundError(f"no model repository folder at {settings.repository}")
        return Sam3Client.local(settings.repository)
    if not settings.address.strip():
        raise ValueError("give the Triton server's gRPC address, e.g. localhost:8001")
    return Sam3Client(settings.address.strip())


class ConnectionWidget(Sam3Widget):
    """Connect to a model; the choice is remembered between napari sessions."""

    def __init__(self, napari_viewer) -> None:
        super().__init__(napari_viewer)
        saved = load_connection()
        self.engine = RadioButtons(
            choices=[EMBEDDED, TRITON],
            value=EMBEDDED if saved.engine == "embedded" else TRITON,
            label="Engine",
        )
        self.repository = LineEdit(
            value=saved.repository,
            label="Repository",
            tooltip="A model repository folder written by sam3-export (run in-process with "
            "ONNX Runtime); relative to napari's working folder, or ~/...",
        )
        self.browse = PushButton(text="Choose folder…")
        self.browse.changed.connect(self._browse)
        self.repository_row = row(self.repository, self.browse, label="Repository")
        self.address = LineEdit(
            value=saved.address, label="Address", tooltip="Triton gRPC address, host:port"
        )
        self.connect_on_start = CheckBox(
            value=saved.connect_on_start, text="Connect when napari opens this widget"
        )
        self.connect_button = PushButton(text="Connect")
        self.disconnect_button = PushButton(text="Disconnect")
        self.info = Label(value="", label="Details")
        self.info.native.setWordWrap(True)
        self.engine.changed.connect(self._engine_changed)
        self.connect_button.changed.connect(self._connect)
        self.disconnect_button.changed.connect(self._disconnect)
        self.extend(
            [
                self.engine,
                self.repository_row,
                self.address,
                self.connect_on_start,
                row(self.connect_button, self.disconnect_button),
                self.info,
            ]
        )
        self._footer()
        self._controls = [self.connect_button, self.engine, self.repository, self.address]
        self._engine_changed()
        self._client_changed(STATE.client)
        if saved.connect_on_start and STATE.client is None:
            self._connect()

    def settings(self) -> ConnectionSettings:
        value = self.repository.value.strip()
        # Remembered as an absolute folder: the next napari session may start elsewhere.
        repository = str(Path(value).expanduser().absolute()) if value else ""
        return ConnectionSettings(
            engine="embedded" if self.engine.value == EMBEDDED else "triton",
            repository=repository,
            address=self.address.value.strip(),
            connect_on_start=bool(self.connect_on_start.value),
        )

    def _browse(self, *_args) -> None:
        from qtpy.QtWidgets import QFileDialog

        folder = QFileDialog.getExistingDirectory(
            self.native, "Model repository (written by sam3-export)", self.repository.value
        )
        if folder:
            self.repository.value = folder

    def _engine_changed(self, *_args) -> None:
        embedded = self.engine.value == EMBEDDED
        self.repository_row.visible = embedded
        self.address.visible = not embedded

    @reports_errors("Connection failed")
    def _connect(self, *_args) -> None:
        settings = self.settings()
        if settings.engine == "embedded":
            where = Path(settings.repository).name or "the model repository"
        else:
            where = settings.address
        self.job.start(
            f"Connecting to {where}", connect, settings, done=lambda c: self._connected(c, settings)
        )

    def _connected(self, client, settings: ConnectionSettings) -> None:
        previous = STATE.client
        _MADE_HERE.add(client)
        STATE.set_client(client)
        _close_if_made_here(previous, keep=client)
        save_connection(settings)

    def _disconnect(self, *_args) -> None:
        client = STATE.client
        STATE.set_client(None)
        _close_if_made_here(client)
        self.status.value = "Disconnected"

    def _client_changed(self, client) -> None:
        super()._client_changed(client)
        self.info.value = model_info(client)
        self.disconnect_button.enabled = client is not None


def _close_if_made_here(client, keep=None) -> None:
    """Close the gRPC channels (or the embedded sessions) of a client this widget made."""
    if client is not None and client is not keep and client in _MADE_HERE:
        _MADE_HERE.discard(client)
        client.close()


def model_info(client) -> str:
    """A few lines on the connected model (the widget's "Model info")."""
    if client is None:
        return "—"
    m = client.manifest
    lines = [
        describe_client(client),
        f"engine: {type(client.engine).__name__}",
        f"exemplar slots: {m.exemplar_slots} · keywords per call: {m.max_keywords} · "
        f"queries: {m.num_queries}",
    ]
    return "\n".join(lines)

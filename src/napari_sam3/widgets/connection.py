"""Connection: choose the embedded engine (a local model repository) or a Triton server."""

from __future__ import annotations

import weakref
from pathlib import Path

from magicgui.widgets import (
    CheckBox,
    ComboBox,
    FloatSpinBox,
    Label,
    LineEdit,
    PushButton,
    RadioButtons,
)

from ..settings import (
    PRECISIONS,
    RUNTIMES,
    ConnectionSettings,
    load_connection,
    save_connection,
)
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
        return Sam3Client.local(
            settings.repository, runtime=settings.runtime, precision=settings.precision
        )
    if not settings.address.strip():
        raise ValueError("give the Triton server's gRPC address, e.g. localhost:8001")
    return Sam3Client(
        settings.address.strip(),
        connect_timeout=settings.connect_timeout,
        request_timeout=settings.request_timeout,
        tls=settings.tls,
        root_certificates=(settings.tls_root_cert or None) if settings.tls else None,
    )


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
            tooltip="A model repository folder written by sam3-export (run in-process); "
            "relative to napari's working folder, or ~/...",
        )
        self.browse = PushButton(text="Choose folder…")
        self.browse.changed.connect(self._browse)
        self.repository_row = row(self.repository, self.browse, label="Repository")
        self.runtime = ComboBox(
            choices=list(RUNTIMES),
            value=saved.runtime,
            label="Runtime",
            tooltip="What runs the graphs: auto (OpenVINO on a CPU, ONNX Runtime with CUDA), "
            "openvino or onnxruntime",
        )
        self.precision = ComboBox(
            choices=list(PRECISIONS),
            value=saved.precision,
            label="Precision",
            tooltip="auto (bf16 where the CPU has it natively, else fp32), fp32, or bf16 "
            "(OpenVINO on a CPU with AVX512_BF16 or AMX only)",
        )
        self.runtime_row = row(self.runtime, self.precision, label="Runtime")
        self.address = LineEdit(
            value=saved.address, label="Address", tooltip="Triton gRPC address, host:port"
        )
        self.connect_timeout = FloatSpinBox(
            value=saved.connect_timeout,
            min=0.5,
            max=3600,
            step=1,
            label="Connect (s)",
            tooltip="How long to wait for a ready server (raise it for a cold start)",
        )
        self.request_timeout = FloatSpinBox(
            value=saved.request_timeout,
            min=1,
            max=86400,
            step=10,
            label="Request (s)",
            tooltip="The most one request may take; a server that stops answering is given up "
            "on after 20 s whatever this says",
        )
        self.timeouts_row = row(self.connect_timeout, self.request_timeout, label="Timeouts")
        self.tls = CheckBox(value=saved.tls, text="TLS (gRPC over TLS)")
        self.tls_root_cert = LineEdit(
            value=saved.tls_root_cert,
            label="CA file",
            tooltip="With TLS: the PEM certificate of the CA that signed the server's "
            "certificate (empty: the system's trusted CAs)",
        )
        self.tls.changed.connect(self._engine_changed)
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
                self.runtime_row,
                self.address,
                self.timeouts_row,
                self.tls,
                self.tls_root_cert,
                self.connect_on_start,
                row(self.connect_button, self.disconnect_button),
                self.info,
            ]
        )
        self._footer()
        self._controls = [
            self.connect_button,
            self.engine,
            self.repository,
            self.runtime,
            self.precision,
            self.address,
            self.connect_timeout,
            self.request_timeout,
            self.tls,
            self.tls_root_cert,
        ]
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
            runtime=self.runtime.value,
            precision=self.precision.value,
            connect_timeout=float(self.connect_timeout.value),
            request_timeout=float(self.request_timeout.value),
            tls=bool(self.tls.value),
            tls_root_cert=self.tls_root_cert.value.strip(),
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
        self.runtime_row.visible = embedded
        self.address.visible = not embedded
        self.timeouts_row.visible = not embedded
        self.tls.visible = not embedded
        self.tls_root_cert.visible = not embedded and bool(self.tls.value)

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
        *(
            [f"runtime: {client.engine.runtime_summary(reasons=True)}"]
            if hasattr(client.engine, "runtime_summary")
            else []
        ),
        f"exemplar slots: {m.exemplar_slots} · keywords per call: {m.max_keywords} · "
        f"queries: {m.num_queries}",
    ]
    return "\n".join(lines)

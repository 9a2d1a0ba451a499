"""Connection: choose the embedded engine (a local model repository) or a Triton server."""

from __future__ import annotations

import weakref
from pathlib import Path

from magicgui.widgets import (
    CheckBox,
    ComboBox,
    Label,
    LineEdit,
    PushButton,
    RadioButtons,
)

from napari_sam3.client.connection import PRECISION_CHOICES, RUNTIME_CHOICES
from napari_sam3.core.errors import MissingFile
from napari_sam3.plugin.settings import ConnectionSettings, load_connection, save_connection
from napari_sam3.plugin.widgets._common import (
    STATE,
    Sam3Widget,
    describe_client,
    number,
    reports_errors,
    row,
)

EMBEDDED = "Embedded (local model repository)"
TRITON = "Triton server"
# Clients this widget made: only these are closed on Disconnect (a client a notebook handed to
# the widgets stays the notebook's).
_MADE_HERE: weakref.WeakSet = weakref.WeakSet()


MIB = 2**20


def connect(settings: ConnectionSettings):
    """A `Sam3Client` for `settings`, made by their `ConnectionSpec` (as the CLI and batch
    workers make theirs); runs in a worker: loading graphs takes a while."""
    spec = settings.spec()
    if spec.embedded and not Path(spec.repository).is_dir():
        raise MissingFile(f"no model repository folder at {settings.repository}")
    return spec.connect()


TIPS = {  # the fields' tooltips
    "runtime": "What runs the graphs: auto (OpenVINO on a CPU, ONNX Runtime with CUDA), "
    "openvino or onnxruntime",
    "precision": "auto (bf16 where the CPU has it natively, else fp32), fp32, bf16 "
    "(OpenVINO on a CPU with AVX512_BF16 or AMX only), or int8 (OpenVINO, the graphs "
    "`sam3-export --quantize` made INT8; the others as auto)",
    "threads": "Threads per graph (0: the runtime's default, every core)",
    "cache_mib": "The bound of the in-process feature cache, MiB (0: the repository's, four full-size images); it must hold one image",
    "connect_timeout": "How long to wait for a ready server (raise it for a cold start)",
    "request_timeout": "The most one request may take; a server that stops answering is given up on after 20 s whatever this says",
    "deadline": "The most one call may take over all its tries (transient errors are retried within it); 0: 1.5 x the request timeout",
}


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
        runtime, precision = list(RUNTIME_CHOICES), list(PRECISION_CHOICES)
        self.runtime = ComboBox(choices=runtime, value=saved.runtime, tooltip=TIPS["runtime"])
        self.precision = ComboBox(
            choices=precision, value=saved.precision, tooltip=TIPS["precision"]
        )
        self.runtime_row = row(self.runtime, self.precision, label="Runtime")
        self.threads = number(int(saved.threads), (0, 1024), "Threads", TIPS["threads"])
        self._saved_cache_bytes = saved.cache_bytes
        self.cache_mib = number(
            int(_mib(saved.cache_bytes)), (0, 2**31 - 1), "Cache (MiB)", TIPS["cache_mib"], step=256
        )
        self.embedded_row = row(self.threads, self.cache_mib, label="Threads, cache")
        self.address = LineEdit(
            value=saved.address, label="Address", tooltip="Triton gRPC address, host:port"
        )
        # the three timeouts: (min, max) seconds, label, step
        for name, span, label, step in (
            ("connect_timeout", (0.5, 3600), "Connect (s)", 1),
            ("request_timeout", (1, 86400), "Request (s)", 10),
            ("deadline", (0, 2 * 86400), "Deadline (s)", 10),  # 0: 1.5 x the request timeout
        ):
            seconds = float(getattr(saved, name) or 0.0)
            setattr(self, name, number(seconds, span, label, TIPS[name], step=step))
        self.timeouts_row = row(
            self.connect_timeout, self.request_timeout, self.deadline, label="Timeouts"
        )
        self.tls = CheckBox(value=saved.tls, text="TLS (gRPC over TLS)")
        self.tls_root_cert = LineEdit(
            value=saved.tls_root_cert,
            label="CA file",
            tooltip="With TLS: the PEM certificate of the CA that signed the server's "
            "certificate (empty: the system's trusted CAs)",
        )
        self.tls_client_cert = LineEdit(
            value=saved.tls_client_cert,
            label="Client cert",
            tooltip="With mutual TLS: our PEM certificate (give its key too; empty: none)",
        )
        self.tls_client_key = LineEdit(
            value=saved.tls_client_key,
            label="Client key",
            tooltip="With mutual TLS: the PEM private key of our certificate",
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
                self.embedded_row,
                self.address,
                self.timeouts_row,
                self.tls,
                self.tls_root_cert,
                self.tls_client_cert,
                self.tls_client_key,
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
            self.threads,
            self.cache_mib,
            self.address,
            self.connect_timeout,
            self.request_timeout,
            self.deadline,
            self.tls,
            self.tls_root_cert,
            self.tls_client_cert,
            self.tls_client_key,
        ]
        self._engine_changed()
        self._client_changed(STATE.client)
        if saved.connect_on_start and STATE.client is None:
            self._connect()

    def settings(self) -> ConnectionSettings:
        """The fields as settings (both engines'); `.spec()` is the connection they choose."""
        value = self.repository.value.strip()
        # Remembered as absolute paths: the next napari session may start elsewhere.
        repository = str(Path(value).expanduser().absolute()) if value else ""
        mib = int(self.cache_mib.value)
        cache_bytes = None if mib == 0 else mib * MIB
        if _mib(self._saved_cache_bytes) == mib:  # unchanged: the exact bound loaded
            cache_bytes = self._saved_cache_bytes
        return ConnectionSettings(
            engine="embedded" if self.engine.value == EMBEDDED else "triton",
            repository=repository,
            address=self.address.value.strip(),
            connect_on_start=bool(self.connect_on_start.value),
            runtime=self.runtime.value,
            precision=self.precision.value,
            threads=int(self.threads.value),
            cache_bytes=cache_bytes,
            connect_timeout=float(self.connect_timeout.value),
            request_timeout=float(self.request_timeout.value),
            deadline=float(self.deadline.value) or None,
            tls=bool(self.tls.value),
            tls_root_cert=_path(self.tls_root_cert.value),
            tls_client_cert=_path(self.tls_client_cert.value),
            tls_client_key=_path(self.tls_client_key.value),
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
        self.embedded_row.visible = embedded
        self.address.visible = not embedded
        self.timeouts_row.visible = not embedded
        self.tls.visible = not embedded
        for field in (self.tls_root_cert, self.tls_client_cert, self.tls_client_key):
            field.visible = not embedded and bool(self.tls.value)

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


def _mib(cache_bytes: int | None) -> int:
    return 0 if cache_bytes is None else max(1, round(cache_bytes / MIB))


def _path(value: str) -> str:
    """A file field as remembered: absolute (napari may start elsewhere next time), or ""."""
    value = value.strip()
    return str(Path(value).expanduser().absolute()) if value else ""


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
            [f"runtime: {summary}"]
            if (summary := client.engine.runtime_summary(reasons=True))
            else []
        ),
        f"exemplar slots: {m.exemplar_slots} · keywords per call: {m.max_keywords} · "
        f"queries: {m.num_queries}",
    ]
    return "\n".join(lines)

"""The plugin's remembered choices (the model connection), kept between napari sessions.

A small JSON file in the user's configuration folder (``platformdirs.user_config_dir``), or in the
folder named by the environment variable ``NAPARI_SAM3_CONFIG_DIR`` (tests and portable setups).
A missing or unreadable file gives the defaults; it is never a reason to fail.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from napari_sam3.client.connection import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    ConnectionSpec,
    check_embedded,
    check_times,
)
from napari_sam3.core.errors import InvalidInput
from napari_sam3.runtime.onnx_runner import AUTO

CONFIG_ENV = "NAPARI_SAM3_CONFIG_DIR"
SETTINGS_FILE = "settings.json"
ENGINES = ("embedded", "triton")


@dataclass
class ConnectionSettings:
    """The panel's connection as remembered: which engine, and the fields of both (switching
    engines keeps the other's). ``spec()`` is the :class:`~napari_sam3.client.connection.ConnectionSpec`
    it stands for, ``from_spec`` the way back; the checks are the spec's own."""

    engine: str = "embedded"  # "embedded" or "triton"
    repository: str = ""  # local model repository (embedded engine)
    address: str = "localhost:8001"  # Triton gRPC address (several, comma-separated: a pool)
    connect_on_start: bool = False
    runtime: str = AUTO  # embedded engine: connection.RUNTIME_CHOICES
    precision: str = AUTO  # embedded engine: connection.PRECISION_CHOICES
    threads: int = 0  # embedded engine: threads per graph (0: the runtime's default)
    cache_bytes: int | None = None  # embedded engine: feature cache bound (None: repository's)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT  # Triton: seconds to wait for a ready server
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT  # Triton: the most one request try may take
    deadline: float | None = None  # Triton: all tries of one call (None: 1.5 x request_timeout)
    tls: bool = False  # Triton: gRPC over TLS
    tls_root_cert: str = ""  # Triton with TLS: the CA file to trust ("" = the system's)
    tls_client_cert: str = ""  # Triton with mutual TLS: our certificate ...
    tls_client_key: str = ""  # ... and its key

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise InvalidInput(f"engine must be one of {ENGINES}, got {self.engine!r}")
        check_embedded(self.runtime, self.precision, self.threads, self.cache_bytes)
        check_times(self.connect_timeout, self.request_timeout, self.deadline)
        if not isinstance(self.tls, bool) or not isinstance(self.connect_on_start, bool):
            raise InvalidInput("tls and connect_on_start must be true or false")
        for name in ("repository", "address", "tls_root_cert", "tls_client_cert", "tls_client_key"):
            if not isinstance(getattr(self, name), str):
                raise InvalidInput(f"{name} must be a text (a file or an address)")

    def spec(self) -> ConnectionSpec:
        """The connection these settings choose (ValueError: what is missing or wrong)."""
        if self.engine == "embedded":
            if not self.repository.strip():
                raise InvalidInput("choose the model repository folder (written by sam3-export)")
            return ConnectionSpec(
                repository=self.repository,
                runtime=self.runtime,
                precision=self.precision,
                threads=self.threads,
                cache_bytes=self.cache_bytes,
            )
        if not self.address.strip():
            raise InvalidInput("give the Triton server's gRPC address, e.g. localhost:8001")
        return ConnectionSpec(
            servers=self.address,
            tls=self.tls,
            # kept while TLS is off (remembered for next time), used only with it
            root_certificates=(self.tls_root_cert.strip() or None) if self.tls else None,
            certificate_chain=(self.tls_client_cert.strip() or None) if self.tls else None,
            private_key=(self.tls_client_key.strip() or None) if self.tls else None,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            deadline=self.deadline,
        )

    @classmethod
    def from_spec(
        cls, spec: ConnectionSpec, base: ConnectionSettings | None = None, **changes
    ) -> ConnectionSettings:
        """Settings that choose `spec`; the other engine's fields (and `connect_on_start`) are
        `base`'s (default: the defaults); `changes` are set last."""
        base = base if base is not None else cls()
        if spec.embedded:
            chosen = dict(
                engine="embedded",
                repository=spec.repository,
                runtime=spec.runtime,
                precision=spec.precision,
                threads=spec.threads,
                cache_bytes=spec.cache_bytes,
            )
        else:
            chosen = dict(
                engine="triton",
                address=",".join(spec.servers),
                tls=spec.tls,
                tls_root_cert=spec.root_certificates or "",
                tls_client_cert=spec.certificate_chain or "",
                tls_client_key=spec.private_key or "",
                connect_timeout=spec.connect_timeout,
                request_timeout=spec.request_timeout,
                deadline=spec.deadline,
            )
        return replace(base, **chosen, **changes)


def config_dir() -> Path:
    """The folder holding the settings file (created when settings are saved)."""
    override = os.environ.get(CONFIG_ENV)
    if override:
        return Path(override)
    from platformdirs import user_config_dir

    return Path(user_config_dir("napari-sam3", appauthor=False))


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def load_connection() -> ConnectionSettings:
    """The remembered connection, or the defaults when nothing (valid) was saved."""
    try:
        data = json.loads(settings_path().read_text(encoding="utf-8"))
        raw = data.get("connection", {})
        known = {f.name for f in fields(ConnectionSettings)}
        return ConnectionSettings(**{k: v for k, v in raw.items() if k in known})
    except (OSError, ValueError, TypeError, AttributeError):
        return ConnectionSettings()


def save_connection(settings: ConnectionSettings) -> Path:
    """Remember `settings` (other sections of the file are kept); returns the file written."""
    path = settings_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data["connection"] = asdict(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    from napari_sam3.core.files import atomic_write_bytes

    return atomic_write_bytes(path, json.dumps(data, indent=2).encode("utf-8"), overwrite=True)

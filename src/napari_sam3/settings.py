"""The plugin's remembered choices (the model connection), kept between napari sessions.

A small JSON file in the user's configuration folder (``platformdirs.user_config_dir``), or in the
folder named by the environment variable ``NAPARI_SAM3_CONFIG_DIR`` (tests and portable setups).
A missing or unreadable file gives the defaults; it is never a reason to fail.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

CONFIG_ENV = "NAPARI_SAM3_CONFIG_DIR"
SETTINGS_FILE = "settings.json"
ENGINES = ("embedded", "triton")
# the embedded engine's choices (napari_sam3.triton_models.onnx_runner: RUNTIMES, PRECISIONS)
RUNTIMES = ("auto", "openvino", "onnxruntime")
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass
class ConnectionSettings:
    """How to reach the model: the embedded engine on a local repository, or a Triton server."""

    engine: str = "embedded"  # "embedded" or "triton"
    repository: str = ""  # local model repository (embedded engine)
    address: str = "localhost:8001"  # Triton gRPC address
    connect_on_start: bool = False
    runtime: str = "auto"  # embedded engine: openvino, onnxruntime or auto
    precision: str = "auto"  # embedded engine: fp32, bf16 or auto
    connect_timeout: float = 10.0  # Triton: seconds to wait for a ready server
    request_timeout: float = 600.0  # Triton: the most one request may take, seconds
    tls: bool = False  # Triton: gRPC over TLS
    tls_root_cert: str = ""  # Triton with TLS: the CA file to trust ("" = the system's)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {RUNTIMES}, got {self.runtime!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        for name in ("connect_timeout", "request_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not isinstance(self.tls, bool) or not isinstance(self.tls_root_cert, str):
            raise ValueError("tls must be true or false and tls_root_cert a file name")


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
    from .io_utils import atomic_write_bytes

    return atomic_write_bytes(path, json.dumps(data, indent=2).encode("utf-8"), overwrite=True)

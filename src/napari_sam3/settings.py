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


@dataclass
class ConnectionSettings:
    """How to reach the model: the embedded engine on a local repository, or a Triton server."""

    engine: str = "embedded"  # "embedded" or "triton"
    repository: str = ""  # local model repository (embedded engine)
    address: str = "localhost:8001"  # Triton gRPC address
    connect_on_start: bool = False

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")


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
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)
    return path

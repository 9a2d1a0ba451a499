"""Check a Triton model repository before a server is started on it.

Every problem found is a `RepositoryError` naming the model and what to do, so that `sam3-serve`
refuses a repository Triton could not serve instead of reporting only "exited with code 1".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from napari_sam3.core import contract
from napari_sam3.core.errors import BadData, RefusedError
from napari_sam3.core.files import read_small_file
from napari_sam3.runtime import onnx_runner
from napari_sam3.runtime.engines.repository_code import stale_logic, stale_logic_message

# A config.pbtxt with the manifest parameter is ~15 kB at full size; refuse to parse anything huge.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
PYTHON_BACKEND = "python"
ENSEMBLE = "ensemble"
_DEFAULT_FILES = {
    "python": "model.py",
    "onnxruntime_onnx": "model.onnx",
    "onnxruntime": "model.onnx",
}


class RepositoryError(RefusedError, ValueError):
    """The model repository cannot be served as it is."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    backend: str  # "python", "ensemble", "onnxruntime", ...
    versions: tuple[int, ...]
    steps: tuple[str, ...] = ()  # an ensemble's composing models

    @property
    def needs_stub(self) -> bool:
        return self.backend == PYTHON_BACKEND


def _backend(config: model_config_pb2.ModelConfig) -> str:
    if config.platform == ENSEMBLE:
        return ENSEMBLE
    if config.backend:
        return config.backend
    if config.platform.startswith("onnxruntime"):
        return "onnxruntime"
    return config.platform or "unknown"


def _read_config(folder: Path) -> model_config_pb2.ModelConfig:
    what = f"model {folder.name}: config.pbtxt"
    try:
        data = read_small_file(folder / "config.pbtxt", MAX_CONFIG_BYTES, what, RepositoryError)
    except FileNotFoundError:
        raise RepositoryError(f"{what}: none in {folder}") from None
    try:
        return text_format.Parse(data.decode("utf-8"), model_config_pb2.ModelConfig())
    except (text_format.ParseError, UnicodeDecodeError) as error:
        raise RepositoryError(
            f"model {folder.name}: config.pbtxt does not parse ({error}); re-export with sam3-export"
        ) from None


def _served_versions(folder: Path, config: model_config_pb2.ModelConfig) -> tuple[int, ...]:
    present = sorted(
        int(p.name)
        for p in folder.iterdir()
        if p.is_dir() and p.name.isdigit() and p.name[0] != "0"
    )
    policy = config.version_policy
    if policy.HasField("specific"):
        wanted = sorted(int(v) for v in policy.specific.versions)
        missing = [v for v in wanted if v not in present]
        if missing:
            raise RepositoryError(
                f"model {folder.name}: config.pbtxt asks for version(s) {missing}, "
                f"which have no folder in {folder}"
            )
        return tuple(wanted)
    if not present:
        raise RepositoryError(f"model {folder.name}: no version folder (e.g. {folder / '1'})")
    if policy.HasField("all"):
        return tuple(present)
    count = policy.latest.num_versions if policy.HasField("latest") else 1
    return tuple(present[-max(count, 1) :])


def _check_graph_size(name: str, version_dir: Path, files: dict) -> None:
    """`model.onnx` plus its external data must add up to what the export wrote."""
    graph = version_dir / "model.onnx"
    entry = files.get(name)
    if not graph.is_file() or not isinstance(entry, dict):
        return
    expected = entry.get("bytes")
    if not isinstance(expected, int) or isinstance(expected, bool):
        return
    data = graph.with_name(graph.name + ".data")
    actual = graph.stat().st_size + (data.stat().st_size if data.is_file() else 0)
    if actual != expected:
        parts = "model.onnx" + (" + model.onnx.data" if data.is_file() else "")
        raise RepositoryError(
            f"model {name}: {parts} in {version_dir} is {actual:,} bytes but the export wrote "
            f"{expected:,} (truncated or replaced?); re-export with sam3-export"
        )


def _check_int8(root: Path, listed: dict) -> None:
    """Every INT8 IR the manifest lists is there, as written (sizes and sha256)."""
    for graph in listed:
        try:
            onnx_runner.check_int8(root / graph / "1", hashes=True)
        except BadData as error:
            raise RepositoryError(f"model {graph}: {error}") from None


def check_repository(repository: str | os.PathLike) -> dict[str, ModelEntry]:
    """Every model of `repository`, checked: config parses, files present, steps exist, the
    model code is this napari-sam3's."""
    root = Path(repository)
    if not root.is_dir():
        raise RepositoryError(
            f"{root} is not a folder: give the model repository written by `sam3-export --out DIR`"
        )
    if not (root / contract.MANIFEST_FILE).is_file():
        raise RepositoryError(
            f"{root} is not a napari-sam3 model repository (no {contract.MANIFEST_FILE}); "
            "write one with `sam3-export --out DIR`"
        )
    try:
        manifest = contract.load_manifest(root)
    except (ValueError, OSError) as error:
        raise RepositoryError(f"{root / contract.MANIFEST_FILE}: {error}") from None
    files = dict(manifest.files or {})
    _check_int8(root, manifest.data.get("int8") or {})
    models: dict[str, ModelEntry] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        config = _read_config(folder)
        if config.name and config.name != folder.name:
            raise RepositoryError(
                f"model {folder.name}: config.pbtxt names it {config.name!r}; "
                "the name must equal the folder's"
            )
        backend = _backend(config)
        versions = _served_versions(folder, config)
        steps = tuple(s.model_name for s in config.ensemble_scheduling.step)
        if backend == ENSEMBLE and not steps:
            raise RepositoryError(f"model {folder.name}: an ensemble without steps")
        filename = config.default_model_filename or _DEFAULT_FILES.get(config.platform or backend)
        for version in versions:
            version_dir = folder / str(version)
            if filename and backend != ENSEMBLE and not (version_dir / filename).is_file():
                raise RepositoryError(
                    f"model {folder.name}: {version_dir / filename} is missing; "
                    "re-export with sam3-export"
                )
            _check_graph_size(folder.name, version_dir, files)
        models[folder.name] = ModelEntry(folder.name, backend, versions, steps)
    if not models:
        raise RepositoryError(
            f"{root} holds no models (no folder with a config.pbtxt); "
            "write them with `sam3-export --out DIR`"
        )
    for graph in files:
        if graph not in models:
            raise RepositoryError(
                f"model {graph}: exported (listed in {contract.MANIFEST_FILE}) but its folder is "
                f"missing from {root}; re-export the whole repository with sam3-export"
            )
    for entry in models.values():
        for step in entry.steps:
            if step not in models:
                raise RepositoryError(
                    f"model {entry.name}: its ensemble step {step!r} is not in {root}; "
                    "re-export the whole repository with sam3-export"
                )
    stale = stale_logic(root)
    if stale:
        raise RepositoryError(stale_logic_message(root, stale))
    return models

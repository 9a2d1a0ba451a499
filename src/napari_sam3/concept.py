"""Portable concepts: exemplar boxes encoded on one image, applied to others.

A concept is SAM3's geometry features of the exemplars (image-independent once produced), stored
as a plain .npz (no pickle) that records the model it came from.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMAT = "napari-sam3/concept"
VERSION = 1


@dataclass
class Concept:
    tensors_: dict[str, np.ndarray]
    model_id: str
    name: str = ""
    boxes: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    labels: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.int64))
    source: str = ""

    def tensors(self) -> dict[str, np.ndarray]:
        return dict(self.tensors_)

    @property
    def n_positive(self) -> int:
        return int(np.sum(np.asarray(self.labels) == 1))

    @property
    def n_negative(self) -> int:
        return int(np.sum(np.asarray(self.labels) == 0))

    def check_model(self, model_id: str) -> None:
        if model_id != self.model_id:
            raise ValueError(
                f"concept {self.name or '(unnamed)'} was encoded with model {self.model_id[:12]}, "
                f"but this client runs model {model_id[:12]}: re-encode the exemplars with this model"
            )

    def __repr__(self) -> str:
        return (
            f"Concept({self.name or '(unnamed)'}: {self.n_positive} positive, "
            f"{self.n_negative} negative, model {self.model_id[:12]})"
        )

    def to_bytes(self) -> bytes:
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "model_id": self.model_id,
            "name": self.name,
            "source": self.source,
            "tensors": sorted(self.tensors_),
        }
        arrays = {f"tensor.{k}": np.asarray(v) for k, v in self.tensors_.items()}
        arrays["boxes"] = np.asarray(self.boxes, np.float64).reshape(-1, 4)
        arrays["labels"] = np.asarray(self.labels, np.int64).reshape(-1)
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Concept:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"Concept.from_bytes takes bytes, got {type(data).__name__}")
        try:
            with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            meta = json.loads(arrays.pop("meta").tobytes().decode())
        except (ValueError, OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as error:
            raise ValueError(f"not a napari-sam3 concept file ({error})") from None
        if meta.get("format") != FORMAT:
            raise ValueError("not a napari-sam3 concept file (wrong format tag)")
        if meta.get("version") != VERSION:
            raise ValueError(f"concept file version {meta.get('version')} is not supported")
        tensors = {}
        for name in meta["tensors"]:
            key = f"tensor.{name}"
            if key not in arrays:
                raise ValueError(f"concept file lacks tensor {name}")
            tensors[name] = arrays[key]
        return cls(
            tensors,
            meta["model_id"],
            meta.get("name", ""),
            arrays.get("boxes", np.zeros((0, 4))),
            arrays.get("labels", np.zeros((0,), np.int64)),
            meta.get("source", ""),
        )

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write atomically; refuses to replace an existing file unless `overwrite`."""
        from .io_utils import atomic_write_bytes

        return atomic_write_bytes(Path(path), self.to_bytes(), overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Concept:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no concept file at {path}")
        return cls.from_bytes(path.read_bytes())

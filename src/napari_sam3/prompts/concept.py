"""Portable concepts: exemplar boxes encoded on one image, applied to others.

A concept is SAM3's geometry features of the exemplars (image-independent once produced), stored
as a plain .npz (no pickle) that records the model it came from.

A concept file comes from elsewhere, so reading one trusts nothing in it: only the known entries
are read, each zip entry's size is checked before it is decompressed, each array's dtype and
shape are checked from its .npy header before its data is read, and the values must be finite.
The model inputs a client sends are built from the validated tensors alone (`Concept.inputs`).
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from napari_sam3.core import contract, validate
from napari_sam3.core.errors import BadData, InvalidInput, InvalidType
from napari_sam3.core.files import read_small_file

FORMAT = "napari-sam3/concept"
VERSION = 1

TENSOR_PREFIX = "tensor."
META, BOXES, LABELS = "meta", "boxes", "labels"
# Bounds that hold for every model before the client's model is known (the full-size concept is
# 9 tokens x 256 floats, 9 KB): larger entries are refused before they are decompressed.
MAX_TENSOR_BYTES = 16 * 2**20
MAX_META_BYTES = 64 * 2**10
MAX_EXEMPLARS = 256
MAX_FILE_BYTES = 64 * 2**20
_NPY_HEADER_BYTES = 4096  # an .npy header (magic, version, dict) is far below this
_DTYPES = {
    contract.CONCEPT_TOKENS_NAME: np.dtype(np.float32),
    contract.CONCEPT_PADDING_MASK: np.dtype(np.bool_),
    BOXES: np.dtype(np.float64),
    LABELS: np.dtype(np.int64),
    META: np.dtype(np.uint8),
}
_RANKS = {
    contract.CONCEPT_TOKENS_NAME: 3,
    contract.CONCEPT_PADDING_MASK: 2,
    BOXES: 2,
    LABELS: 1,
    META: 1,
}


@dataclass
class Concept:
    tensors_: dict[str, np.ndarray]
    model_id: str
    name: str = ""
    boxes: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    labels: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.int64))
    source: str = ""

    def tensors(self) -> dict[str, np.ndarray]:
        """The concept's tensors (only the names a concept has: `contract.CONCEPT_OUTPUTS`)."""
        return {k: self.tensors_[k] for k in contract.CONCEPT_OUTPUTS if k in self.tensors_}

    def inputs(self, manifest: contract.Manifest) -> dict[str, np.ndarray]:
        """The model inputs for `manifest`'s model: checked against its specs, nothing else."""
        self.check_model(manifest.model_id)
        where = f"concept {self.name or '(unnamed)'}"
        specs = {s.name: s for s in contract.concept_specs(manifest.sizes)}
        missing = [n for n in specs if n not in self.tensors_]
        if missing:
            raise BadData(f"{where} lacks the tensor {missing[0]}; re-encode the exemplars")
        out = {}
        for name_, spec in specs.items():
            value = np.asarray(self.tensors_[name_])
            _check_array(where, name_, value.dtype, value.shape, tuple(spec.shape))
            out[name_] = np.ascontiguousarray(value)
        validate.concept_tensors(
            out[contract.CONCEPT_TOKENS_NAME], out[contract.CONCEPT_PADDING_MASK], where
        )
        return out

    @property
    def n_positive(self) -> int:
        return int(np.sum(np.asarray(self.labels) == 1))

    @property
    def n_negative(self) -> int:
        return int(np.sum(np.asarray(self.labels) == 0))

    def check_model(self, model_id: str) -> None:
        if model_id != self.model_id:
            raise InvalidInput(
                f"concept {self.name or '(unnamed)'} was encoded with model {self.model_id[:12]}, "
                f"but this client runs model {model_id[:12]}: re-encode the exemplars with this model"
            )

    def __repr__(self) -> str:
        return (
            f"Concept({self.name or '(unnamed)'}: {self.n_positive} positive, "
            f"{self.n_negative} negative, model {self.model_id[:12]})"
        )

    def to_bytes(self) -> bytes:
        tensors = self.tensors()
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "model_id": self.model_id,
            "name": self.name,
            "source": self.source,
            "tensors": sorted(tensors),
        }
        arrays = {f"{TENSOR_PREFIX}{k}": np.asarray(v) for k, v in tensors.items()}
        arrays[BOXES] = np.asarray(self.boxes, np.float64).reshape(-1, 4)
        arrays[LABELS] = np.asarray(self.labels, np.int64).reshape(-1)
        arrays[META] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        source: str = "concept data",
        manifest: contract.Manifest | None = None,
    ) -> Concept:
        """Read a concept file's bytes; every malformed file is a ValueError naming `source`.

        With `manifest`, the tensors must also have exactly that model's shapes (a client checks
        them again in `inputs` before every use).
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidType(f"Concept.from_bytes takes bytes, got {type(data).__name__}")
        return _read(bytes(data), source, manifest)

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write atomically; refuses to replace an existing file unless `overwrite`."""
        from napari_sam3.core.files import atomic_write_bytes

        return atomic_write_bytes(Path(path), self.to_bytes(), overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike, manifest: contract.Manifest | None = None) -> Concept:
        data = read_small_file(path, MAX_FILE_BYTES, "concept file")
        return cls.from_bytes(data, str(path), manifest)

    @classmethod
    def load_named(
        cls, path: str | os.PathLike, manifest: contract.Manifest | None = None
    ) -> Concept:
        """`load`, with the file's stem as the name of a concept saved without one: how the CLI,
        scene runs and the QGIS provider label a concept file's detections."""
        concept = cls.load(path, manifest)
        concept.name = concept.name or Path(path).stem
        return concept


# ---------------------------------------------------------------------------------------------
# reading


class _BadConceptFile(BadData):
    """A concept file found malformed (a ValueError naming the file and the problem)."""


def _read(data: bytes, source: str, manifest: contract.Manifest | None) -> Concept:
    def bad(problem: str) -> ValueError:
        return _BadConceptFile(f"{source}: not a usable napari-sam3 concept file ({problem})")

    if not data:
        raise bad("the file is empty")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as error:
        raise bad(f"not an .npz archive: {error}") from None
    with archive:
        entries = _entries(archive, bad)
        if META not in entries:
            raise bad("no 'meta' entry")
        meta_bytes = _read_entry(archive, entries[META], META, None, MAX_META_BYTES, bad)
        meta = _parse_meta(meta_bytes.tobytes(), bad)
        names = meta["tensors"]
        expected = {f"{TENSOR_PREFIX}{n}" for n in names} | {META, BOXES, LABELS}
        unknown = sorted(set(entries) - expected)
        if unknown:
            raise bad(f"unknown entries {unknown}; a concept holds only {sorted(expected)}")
        specs = (
            {s.name: tuple(s.shape) for s in contract.concept_specs(manifest.sizes)}
            if manifest is not None
            else {}
        )
        tensors = {}
        for name_ in names:
            key = f"{TENSOR_PREFIX}{name_}"
            if key not in entries:
                raise bad(f"the meta lists tensor {name_} but the file lacks it")
            bound = MAX_TENSOR_BYTES
            if name_ in specs:
                bound = math.prod(specs[name_]) * _DTYPES[name_].itemsize
            tensors[name_] = _read_entry(archive, entries[key], name_, specs.get(name_), bound, bad)
        boxes = np.zeros((0, 4), np.float64)
        labels = np.zeros((0,), np.int64)
        if BOXES in entries:
            boxes = _read_entry(archive, entries[BOXES], BOXES, None, 32 * MAX_EXEMPLARS, bad)
        if LABELS in entries:
            labels = _read_entry(archive, entries[LABELS], LABELS, None, 8 * MAX_EXEMPLARS, bad)
    if boxes.shape[1:] != (4,):
        raise bad(f"boxes have shape {list(boxes.shape)}, expected [N, 4]")
    if labels.shape != (len(boxes),) or not np.isin(labels, (0, 1)).all():
        raise bad(f"labels must be one 0 or 1 per box, got shape {list(labels.shape)}")
    validate.boxes(boxes, BOXES, where=source)
    tokens = tensors[contract.CONCEPT_TOKENS_NAME]
    padding = tensors[contract.CONCEPT_PADDING_MASK]
    if tokens.shape[:2] != padding.shape:
        raise bad(
            f"{contract.CONCEPT_TOKENS_NAME} {list(tokens.shape)} and "
            f"{contract.CONCEPT_PADDING_MASK} {list(padding.shape)} disagree on the tokens"
        )
    validate.concept_tensors(tokens, padding, source)
    concept = Concept(tensors, meta["model_id"], meta["name"], boxes, labels, meta["source"])
    if manifest is not None:
        concept.check_model(manifest.model_id)
    return concept


def _entries(archive: zipfile.ZipFile, bad) -> dict[str, zipfile.ZipInfo]:
    entries: dict[str, zipfile.ZipInfo] = {}
    infos = archive.infolist()
    if len(infos) > 16:
        raise bad(f"{len(infos)} entries; a concept has at most 5")
    for info in infos:
        if not info.filename.endswith(".npy"):
            raise bad(f"entry {info.filename!r} is not an .npy array")
        key = info.filename[: -len(".npy")]
        if key in entries:
            raise bad(f"entry {info.filename!r} appears twice")
        entries[key] = info
    return entries


def _read_entry(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    name: str,
    shape: tuple[int, ...] | None,
    max_bytes: int,
    bad,
) -> np.ndarray:
    """One .npy entry, refused unless its size, dtype and shape fit before its data is read."""
    if info.file_size > max_bytes + _NPY_HEADER_BYTES:
        raise bad(
            f"entry {name} unpacks to {info.file_size:,} bytes, over the {max_bytes:,} it can need"
        )
    try:
        with archive.open(info) as stream:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                header = np.lib.format.read_array_header_1_0(stream, max_header_size=2048)
            elif version in ((2, 0), (3, 0)):
                header = np.lib.format.read_array_header_2_0(stream, max_header_size=2048)
            else:
                raise BadData(f"unknown .npy version {version}")
            shape_, fortran, dtype = header
            if dtype.hasobject:
                raise bad(f"entry {name} holds Python objects (pickles are refused)")
            _check_array(None, name, dtype, shape_, shape, bad)
            nbytes = math.prod(shape_) * dtype.itemsize
            if nbytes > max_bytes:
                raise bad(f"entry {name} claims {nbytes:,} bytes, over the {max_bytes:,} allowed")
            raw = stream.read(nbytes + 1)
    except _BadConceptFile:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as error:
        raise bad(f"entry {name} is not a readable array: {error}") from None
    if len(raw) != nbytes:
        raise bad(f"entry {name} holds {len(raw):,} data bytes, its header says {nbytes:,}")
    array = np.frombuffer(raw, dtype=dtype)
    return array.reshape(shape_, order="F" if fortran else "C").copy()


def _check_array(where, name, dtype, shape, expected, bad=None) -> None:
    def fail(problem: str) -> ValueError:
        return bad(problem) if bad is not None else InvalidInput(f"{where}: {problem}")

    want = _DTYPES.get(name)
    if want is not None and np.dtype(dtype) != want:
        raise fail(f"{name} has dtype {np.dtype(dtype)}, expected {want}")
    rank = _RANKS.get(name)
    if rank is not None and len(shape) != rank:
        raise fail(f"{name} has shape {list(shape)}, expected {rank} dimensions")
    if expected is not None and tuple(shape) != tuple(expected):
        raise fail(
            f"{name} has shape {list(shape)}, but this model's concepts are {list(expected)}: "
            "re-encode the exemplars with this model"
        )
    if name in contract.CONCEPT_OUTPUTS and (not shape or shape[0] != 1):
        raise fail(f"{name} has shape {list(shape)}, expected a batch of 1")


def _parse_meta(raw: bytes, bad) -> dict:
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad(f"meta is not JSON: {error}") from None
    if not isinstance(meta, dict):
        raise bad(f"meta is a JSON {type(meta).__name__}, expected an object")
    if meta.get("format") != FORMAT:
        raise bad(f"format tag {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise bad(f"version {meta.get('version')!r}; this napari-sam3 reads version {VERSION}")
    for key in ("model_id", "name", "source"):
        if not isinstance(meta.get(key, ""), str):
            raise bad(f"meta field {key!r} must be a string")
    if not isinstance(meta.get("model_id"), str) or not meta["model_id"]:
        raise bad("meta lacks the model_id")
    listed = meta.get("tensors")
    if (
        not isinstance(listed, list)
        or not all(isinstance(n, str) for n in listed)
        or sorted(listed) != sorted(contract.CONCEPT_OUTPUTS)
    ):
        raise bad(
            f"meta lists tensors {meta.get('tensors')!r}, expected {sorted(contract.CONCEPT_OUTPUTS)}"
        )
    return {
        "model_id": meta["model_id"],
        "name": meta.get("name", ""),
        "source": meta.get("source", ""),
        "tensors": list(contract.CONCEPT_OUTPUTS),
    }

"""A scene run's finished tiles, journaled beside its output, so that a killed run resumes.

``<output>.napari-sam3-partial/`` holds ``run.json`` (what the run is: the query, the scene
settings, the model and the raster, by their keys) and one record per finished tile
(``tile-000012.bin``: its detections exactly as :func:`~napari_sam3.scene.segment_scene` keeps
them before the seams are joined; an all-nodata tile as such). Each file is written atomically
(:mod:`napari_sam3.core.files`: a temporary name, flushed, then renamed), so a kill or a power
loss leaves whole records or none; a record that does not read back whole (its checksum, its
run) is dropped with a warning and its tile runs again. A resumed run merges the journaled
tiles with the new ones in tile order, so it writes what an uninterrupted run writes. A journal
made by another query, settings, model or raster is refused, naming what differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from napari_sam3.core.errors import BadData, ConnectionFailed, InvalidInput, InvalidState, TimedOut
from napari_sam3.core.files import atomic_write_bytes, file_fingerprint
from napari_sam3.imagery.raster import RasterInfo
from napari_sam3.imagery.remote import RemoteRasterError, fetch_validators, is_remote
from napari_sam3.masks.rle import RleMask
from napari_sam3.scene.masks import SceneMask
from napari_sam3.scene.merge import Detection

__all__ = [
    "PARTIAL_SUFFIX",
    "TileJournal",
    "journal_path",
    "journaled_tiles",
    "run_identity",
    "source_fingerprint",
    "unfinished",
]

PARTIAL_SUFFIX = ".napari-sam3-partial"
RUN_FILE = "run.json"
VERSION = 1
_MAGIC = b"napari-sam3 tile 1\n"
_DIGEST = 16  # bytes of blake2b closing every record
# what each part of a run's identity is, as a refusal names it
_PARTS = {
    "version": "another version of napari-sam3's journal",
    "query": "another query (keywords, concepts, exemplars, thresholds or post-processing)",
    "settings": "other scene settings (tile size, overlap, bands, stretch, nodata, gsd, area of "
    "interest or seam_iou)",
    "model": "another model",
    "raster": "another raster, or the raster changed since (its path, size, modification time "
    "or header)",
}


def journal_path(target: str | os.PathLike) -> Path:
    """Where the run writing ``target`` journals its finished tiles."""
    target = Path(target)
    return target.with_name(target.name + PARTIAL_SUFFIX)


def journaled_tiles(folder: str | os.PathLike) -> int:
    """How many tile records the journal ``folder`` holds (0: none, or no journal)."""
    folder = Path(folder)
    return len(list(folder.glob("tile-*.bin"))) if folder.is_dir() else 0


def unfinished(book: Path, target: Path) -> str:
    """Why a run of ``target`` is refused while the journal ``book`` of an earlier one is there."""
    return (
        f"{book} holds an unfinished run of {target.name} ({journaled_tiles(book)} tiles "
        "finished): pass resume (--resume) to continue it, or overwrite (--overwrite) to start "
        "afresh"
    )


def source_fingerprint(item: str | os.PathLike) -> dict[str, Any]:
    """What says a file or URL is the one seen before (the one rule of the tile journal and the
    folder journal): a local file's real path, size and modification time
    (:func:`~napari_sam3.core.files.file_fingerprint`); a URL as given, with the validators
    its server gives now (ETag, Last-Modified, size: one HEAD request,
    :func:`~napari_sam3.imagery.remote.fetch_validators`). A server that gives none leaves the
    URL and, in a run's identity, the header as read as the only signs of change."""
    if is_remote(item):
        url = os.fspath(item)
        try:
            validators = fetch_validators(url)
        except RemoteRasterError as error:
            if isinstance(error, ConnectionFailed | TimedOut):
                raise
            validators = {}  # a URL signed for GET only refuses HEAD: the header must do
        return {"url": url, **validators}
    path = Path(item).resolve()
    return {"path": str(path), **file_fingerprint(path)}


def raster_identity(source: Any, info: RasterInfo) -> dict[str, Any]:
    """What says the raster is the one a journal was made from: each file's or URL's
    :func:`source_fingerprint`, and the header as read."""
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    files = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise InvalidInput(
                f"a journaled run reads its raster from files or URLs, got {type(item).__name__}"
            )
        files.append(source_fingerprint(item))
    return {
        "files": files,
        "shape": list(info.shape),
        "dtype": str(info.dtype),
        "crs": None if info.crs is None else info.crs.to_string(),
        "transform": list(info.transform)[:6],
    }


def run_identity(
    model_id: str, query: Any, settings: Any, source: Any, info: RasterInfo
) -> dict[str, Any]:
    """A scene run's identity as ``run.json`` keeps it: the query's and the settings' keys
    (:meth:`~napari_sam3.prompts.query.Query.key`,
    :meth:`~napari_sam3.scene.settings.SceneSettings.key`), the model's id and the raster's
    identity. Equal identities make equal detections, tile by tile."""
    return {
        "version": VERSION,
        "query": query.key(),
        "settings": settings.key(),
        "model": str(model_id),
        "raster": raster_identity(source, info),
    }


def _run_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


class TileJournal:
    """The open journal of one run: the tiles it holds (``finished``: tile index -> detections,
    None for a tile with no valid pixel) and :meth:`add` for each tile as it finishes."""

    def __init__(self, folder: Path, identity: dict[str, Any]) -> None:
        self.folder = folder
        self.identity = identity
        self.key = _run_key(identity)
        self.finished: dict[int, list[Detection] | None] = {}
        self.seconds = 0.0  # spent writing records (in the writer thread)
        self._made = False  # the folder and run.json
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []

    @classmethod
    def open(cls, folder: str | os.PathLike, identity: dict[str, Any], resume: bool) -> TileJournal:
        """The journal at ``folder`` for the run ``identity``. ``resume``: the tiles an earlier
        run of the same identity recorded there are ``finished`` (one of another identity is
        refused with what differs); else any journal there is replaced, with a warning."""
        journal = cls(Path(folder), identity)
        if resume and (journal.folder / RUN_FILE).exists():
            journal._check(journal._read_identity())
            journal._load()
            journal._made = True
            return journal
        if journal.folder.exists():
            held = journaled_tiles(journal.folder)
            if held:
                warnings.warn(
                    f"replacing the journal {journal.folder} of an unfinished run ({held} tiles): "
                    "this run starts afresh",
                    UserWarning,
                    stacklevel=3,
                )
            journal.remove()
        return journal  # made with the first tile: a run that fails before leaves nothing

    def _read_identity(self) -> dict[str, Any]:
        path = self.folder / RUN_FILE
        try:
            found = json.loads(path.read_bytes())
            if not isinstance(found, dict):
                raise InvalidInput("not a JSON object")
        except (OSError, ValueError) as error:
            raise BadData(
                f"the journal {self.folder} cannot be read ({path.name}: {error}); remove it, or "
                "run without resume (--resume) and with overwrite (--overwrite) to start afresh"
            ) from None
        return found

    def _check(self, found: dict[str, Any]) -> None:
        differs = [part for part in _PARTS if found.get(part) != self.identity.get(part)]
        if not differs:
            return
        said = [_PARTS[part] for part in differs]
        if "model" in differs:
            old, new = str(found.get("model"))[:12], str(self.identity["model"])[:12]
            said[differs.index("model")] = f"another model ({old}; this run's is {new})"
        raise InvalidState(
            f"the journal {self.folder} ({journaled_tiles(self.folder)} tiles) was made by a "
            f"run with {'; '.join(said)}, so this run cannot resume it: run with the same "
            "query, settings, model and raster, or start afresh (run without resume (--resume) "
            "and with overwrite (--overwrite), or remove the journal)"
        )

    def _load(self) -> None:
        for leftover in self.folder.glob(".*"):  # a write a kill interrupted
            with contextlib.suppress(OSError):
                leftover.unlink()
        damaged = []
        for path in sorted(self.folder.glob("tile-*.bin")):
            try:
                tile, found = decode_record(path.read_bytes(), self.key)
            except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
                damaged.append(f"{path.name} ({error})")
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            self.finished[tile] = found
        if damaged:
            warnings.warn(
                f"the journal {self.folder}: {len(damaged)} damaged record(s) dropped, their "
                f"tiles run again: {', '.join(damaged[:3])}",
                UserWarning,
                stacklevel=4,
            )

    def add(self, tile: int, found: list[Detection] | None) -> None:
        """Record ``tile``'s detections (None: no valid pixel). The record is written by a
        thread beside the run (its flush to the disk overlaps the next tiles); a write that
        failed is raised here, at the next tile, or by :meth:`close`. A record a kill
        prevented is a tile that runs again."""
        self._raise_failed()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="sam3-journal")
        self._pending.append(self._writer.submit(self._write, tile, found))
        self.finished[tile] = found

    def _write(self, tile: int, found: list[Detection] | None) -> None:
        t0 = time.perf_counter()
        if not self._made:
            self.folder.mkdir(exist_ok=True)
            data = json.dumps(self.identity, indent=1, sort_keys=True).encode()
            atomic_write_bytes(self.folder / RUN_FILE, data, overwrite=True)
            self._made = True
        atomic_write_bytes(self._record(tile), encode_record(self.key, tile, found), True)
        self.seconds += time.perf_counter() - t0

    def _raise_failed(self) -> None:
        for future in [f for f in self._pending if f.done()]:
            self._pending.remove(future)
            future.result()

    def close(self, quiet: bool = False) -> None:
        """Wait for the records being written; raise the first that failed (``quiet``: the run
        failed already, its own error goes on)."""
        if self._writer is None:
            return
        try:
            for future in self._pending:
                if quiet:
                    future.exception()
                else:
                    future.result()
        finally:
            self._pending.clear()
            self._writer.shutdown(wait=True)
            self._writer = None

    def _record(self, tile: int) -> Path:
        return self.folder / f"tile-{tile:06d}.bin"

    def remove(self) -> None:
        """Remove the journal (the run is written, or starts afresh)."""
        shutil.rmtree(self.folder, ignore_errors=True)


# ----------------------------------------------------------------------------- records


def encode_record(key: str, tile: int, found: Sequence[Detection] | None) -> bytes:
    """One tile's record: a header (JSON: the run's key, the tile, strings), the numbers as
    little-endian arrays (scores, boxes, each mask's placement, every mask's runs), and a
    blake2b digest of all of it."""
    dets = list(found or ())
    shape = list(dets[0].mask.scene_shape) if dets else [0, 0]
    header = {
        "run": key,
        "tile": int(tile),
        "nodata": found is None,
        "scene": shape,
        "keywords": [d.keyword for d in dets],
        "prompt_kinds": [d.prompt_kind for d in dets],
    }
    runs = [np.asarray(d.mask.rle.runs, dtype="<i8") for d in dets]
    placement = np.array(
        [
            [d.mask.row, d.mask.col, *d.mask.rle.shape, r.size, int(d.cut), d.merged]
            for d, r in zip(dets, runs, strict=True)
        ],
        dtype="<i8",
    ).reshape(len(dets), 7)
    head = json.dumps(header).encode()
    body = b"".join(
        [
            _MAGIC,
            struct.pack("<I", len(head)),
            head,
            np.array([d.score for d in dets], dtype="<f8").tobytes(),
            np.array([d.box for d in dets], dtype="<f4").reshape(len(dets), 4).tobytes(),
            placement.tobytes(),
            *(r.tobytes() for r in runs),
        ]
    )
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def decode_record(data: bytes, key: str) -> tuple[int, list[Detection] | None]:
    """(tile, detections or None) from :func:`encode_record`'s bytes; BadData when they are not
    whole (a torn or damaged file) or belong to another run."""
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if len(data) < len(_MAGIC) + 4 + _DIGEST or not body.startswith(_MAGIC):
        raise BadData("not a tile record")
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        raise BadData("its checksum does not match: torn or damaged")
    at = len(_MAGIC)
    (size,) = struct.unpack_from("<I", body, at)
    at += 4
    header = json.loads(body[at : at + size])
    at += size
    if header.get("run") != key:
        raise BadData("it belongs to another run")
    n = len(header["keywords"])
    scores = np.frombuffer(body, "<f8", n, at)
    at += 8 * n
    boxes = np.frombuffer(body, "<f4", 4 * n, at).reshape(n, 4)
    at += 16 * n
    placement = np.frombuffer(body, "<i8", 7 * n, at).reshape(n, 7)
    at += 56 * n
    shape = tuple(header["scene"])
    tile = int(header["tile"])
    dets = []
    for i, (row, col, h, w, count, cut, merged) in enumerate(placement.tolist()):
        runs = np.frombuffer(body, "<i8", count, at)
        at += 8 * count
        dets.append(
            Detection(
                mask=SceneMask(RleMask(runs, (h, w)), row, col, shape),
                box=boxes[i].astype(np.float32),
                score=float(scores[i]),
                keyword=header["keywords"][i],
                prompt_kind=header["prompt_kinds"][i],
                tile=tile,
                cut=bool(cut),
                merged=int(merged),
            )
        )
    if at != len(body):
        raise BadData("its length does not match its header")
    return tile, None if header["nodata"] else dets

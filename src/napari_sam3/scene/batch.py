"""Folders of scenes: one task per scene on dask.distributed, a run journal, resume, a lock.

``segment_scenes(spec, paths, out_dir)`` segments every scene into ``out_dir/<stem>.<fmt>``
(written atomically by :func:`~napari_sam3.scene.write_scene`, with the model's provenance and the
optional vector post-processing). Scenes run as tasks of a ``dask.distributed`` cluster (a
``LocalCluster`` of ``workers`` processes, or the scheduler at ``scheduler``), or one after another
in this process when neither is given. Each worker process makes its own client once, from
``spec`` (a :class:`~napari_sam3.client.connection.ConnectionSpec`: picklable, it holds the embedded
repository or the Triton addresses with their TLS files and timeouts, exactly as the CLI and the
panel connect). Concepts travel to the workers as they are (computed once by the caller), so
every worker applies the same ones. A failed scene is retried once, then reported; the others
finish.

Beside the outputs, ``napari-sam3-journal.json`` (rewritten atomically after every scene) records
each finished scene: the input's size and mtime, the run's key (:func:`run_key`: the query, the
settings, the format), the output and its feature count. ``resume=True`` skips a scene whose
journal entry matches the input, the key and an existing output, and continues a scene that was
stopped mid-way from its tile journal (:mod:`~napari_sam3.scene.journal`, beside its output). ``.napari-sam3.lock`` keeps a second run from writing the same folder at once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import socket
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.core.errors import (
    BadData,
    InvalidInput,
    InvalidType,
    MissingFile,
    OutputExists,
    RefusedError,
    Sam3Error,
)
from napari_sam3.core.files import atomic_write_bytes, remove_temporaries
from napari_sam3.imagery.remote import file_name, is_remote
from napari_sam3.prompts.query import Query
from napari_sam3.scene.cluster import dask_client, worker_client
from napari_sam3.scene.journal import journal_path, source_fingerprint, unfinished
from napari_sam3.scene.output import refuse_inputs
from napari_sam3.scene.run import query_and_settings
from napari_sam3.scene.settings import SceneSettings

__all__ = ["BatchResult", "FolderLocked", "segment_scenes"]

JOURNAL = "napari-sam3-journal.json"
LOCK = ".napari-sam3.lock"
PathLike = str | os.PathLike
STOP_SECONDS = 120.0  # on Ctrl-C, the longest wait for running scenes to reach their next tile


class FolderLocked(Sam3Error, RuntimeError):
    """Another run is writing the output folder."""


@dataclass
class BatchResult:
    """What happened to each scene: ``done`` / ``skipped`` (resume) / ``failed`` {path: ...}."""

    out_dir: Path
    done: dict[str, dict] = field(default_factory=dict)
    skipped: dict[str, dict] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


# ----------------------------------------------------------------------------- one scene


def run_key(query: Query, settings: SceneSettings, fmt: str, simplify: float) -> str:
    """What identifies a scene's output in the journal: the query (by content: a concept by its
    tensors), the settings that change detections (not the memory budget or requests in
    flight), the format and the simplification."""
    text = json.dumps([query.key(), settings.key(), fmt, simplify], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def segment_one(
    spec: ConnectionSpec,
    path: str,
    target: str,
    query: Query,
    settings: SceneSettings,
    overwrite: bool,
    simplify: float,
    cog: bool = False,
    resume: bool = False,
    progress: Any = False,
) -> dict[str, Any]:
    """One scene on this process's client -> its output with the model's provenance, written
    atomically (:func:`~napari_sam3.scene.driver.segment_to_file`, which journals its tiles;
    ``resume``: continuing a journal there); a summary.
    `progress`: as :func:`~napari_sam3.scene.segment_scene`'s (a ``callable(done, total)``).
    """
    from napari_sam3.scene.driver import segment_to_file

    outcome = segment_to_file(
        worker_client(spec),
        path,
        target,
        query,
        settings,
        overwrite=overwrite,
        simplify=simplify,
        cog=cog,
        progress=progress,
        resume=resume,
    )
    return outcome.summary()


# ----------------------------------------------------------------------------- folder state


def scene_stem(source: Any) -> str:
    """The name a scene's output takes (before its suffix): a STAC item's id, else the stem of
    the file or of the URL's path (its query string left out)."""
    from napari_sam3.imagery.stac import LoadedItem, is_stac, read_stac

    if is_stac(source):
        import pystac

        stac = read_stac(source)
        if isinstance(stac, pystac.Item):
            return LoadedItem.of(stac).stem
    return Path(file_name(source)).stem


def scene_key(source: Any) -> str:
    """A scene's entry in the folder journal: a URL as given, a file by its name, a STAC item
    given as an object by its id."""
    if not isinstance(source, str | os.PathLike):
        return f"stac-item:{source.id}"
    return os.fspath(source) if is_remote(source) else Path(source).name


def scene_fingerprint(source: Any, assets: Sequence[str] | None = None) -> dict[str, Any]:
    """What says a scene is the one the journal saw: its file or URL
    (:func:`~napari_sam3.scene.journal.source_fingerprint`: size and mtime, or the server's
    ETag / Last-Modified), and for a STAC item each band file or COG it reads as well."""
    from napari_sam3.imagery.stac import LoadedItem, is_stac, read_stac, scene_source

    if not is_stac(source):
        return source_fingerprint(source)
    if isinstance(source, str | os.PathLike) and not isinstance(source, LoadedItem):
        own = source_fingerprint(source)  # the item's file or URL
    else:  # an item held already (a search's): its content is its own
        own = {"item": read_stac(source).id}
    hrefs = scene_source(source, assets)
    hrefs = [hrefs] if isinstance(hrefs, str | os.PathLike) else list(hrefs)
    return {**own, "bands": [source_fingerprint(h) for h in hrefs]}


def _as_scene(source: Any) -> Any:
    """A scene as the batch keeps it: a local file resolved; a URL or a pystac Item as given."""
    if is_remote(source) or not isinstance(source, str | os.PathLike):
        return source
    return Path(source).resolve()


def plan_targets(paths: Sequence[Any], out: Path, fmt: str) -> dict[Any, Path]:
    """``out/<stem>.<fmt>`` for every scene (:func:`scene_stem`); refuses two scenes that
    would write one file, naming them."""
    from napari_sam3.core.formats import FORMAT_SUFFIXES

    targets = {p: out / f"{scene_stem(p)}{FORMAT_SUFFIXES[fmt]}" for p in paths}
    seen: dict[Path, Any] = {}
    for source, target in targets.items():
        if target in seen:
            raise InvalidInput(
                f"{seen[target]} and {source} would both write {target.name}; run them into "
                "separate folders, or rename one"
            )
        seen[target] = source
    return targets


def writable_folder(out: Path) -> Path:
    """The output folder, made if missing; one this process cannot write in (read-only, not
    its own) is refused in one line before anything runs, not by the first file written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RefusedError(
            f"cannot make the output folder {out} ({error.strerror}); choose another folder"
        ) from None
    if not out.is_dir():
        raise RefusedError(f"the output folder {out} is a file; choose a folder")
    if not os.access(out, os.W_OK | os.X_OK):
        raise RefusedError(
            f"cannot write in the output folder {out} (read-only, or not this user's); choose "
            "another folder or make it writable"
        )
    return out


@contextlib.contextmanager
def folder_lock(out_dir: Path) -> Iterator[Path]:
    """``out_dir/.napari-sam3.lock`` held for the block; refuses when another live run holds it."""
    lock = out_dir / LOCK
    me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_lock(lock)
            if holder is not None and not _stale(holder):
                raise FolderLocked(
                    f"{out_dir} is being written by another run (pid {holder.get('pid')} on "
                    f"{holder.get('host')}); wait for it, or give another output folder. If no "
                    f"such run exists, remove {lock}"
                ) from None
            warnings.warn(f"removing a stale lock {lock} (its run has ended)", stacklevel=3)
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(me, handle)
        break
    else:
        raise FolderLocked(f"cannot take the lock {lock}; remove it if no run is writing there")
    try:
        yield lock
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def _read_lock(lock: Path) -> dict | None:
    try:
        return json.loads(lock.read_text())
    except (OSError, ValueError):
        return None  # half-written or unreadable: treated as stale


def _stale(holder: dict) -> bool:
    if holder.get("host") != socket.gethostname():
        return False  # another machine's run: never guess
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def load_journal(out_dir: Path) -> dict[str, Any]:
    path = out_dir / JOURNAL
    if not path.exists():
        return {"version": 1, "scenes": {}}
    try:
        journal = json.loads(path.read_text())
        if not isinstance(journal, dict) or not isinstance(journal.get("scenes"), dict):
            raise InvalidInput("no 'scenes' table")
    except (OSError, ValueError) as error:
        raise BadData(
            f"the run journal {path} is unreadable ({error}); remove it to start afresh"
        ) from None
    return journal


def _write_journal(out_dir: Path, journal: dict[str, Any]) -> None:
    data = json.dumps(journal, indent=1, sort_keys=True, default=str).encode()
    atomic_write_bytes(out_dir / JOURNAL, data, overwrite=True)


def _finished(entry: dict | None, path: Any, target: Path, key: str, assets: Any) -> bool:
    if not entry or entry.get("status") != "done" or entry.get("options") != key:
        return False
    if not target.exists() or entry.get("output") != target.name:
        return False
    return entry.get("input") == scene_fingerprint(path, assets)


# ----------------------------------------------------------------------------- the batch


def segment_scenes(
    spec: ConnectionSpec,
    paths: Sequence[PathLike],
    out_dir: PathLike,
    query: Query | str | None = None,
    settings: SceneSettings | None = None,
    *,
    fmt: str = "gpkg",
    workers: int | None = None,
    scheduler: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    retries: int = 1,
    simplify: float = 0.0,
    scheduler_timeout: float = 5.0,
    report: Any = None,
    progress: Any = None,
    **options: Any,
) -> BatchResult:
    """Segment every scene of `paths` into ``out_dir/<stem>.<fmt>``; see the module doc.

    Args:
        spec: a :class:`~napari_sam3.client.connection.ConnectionSpec` (each worker process makes
            its client from it, once).
        paths: raster files, ``http(s)://`` URLs (COGs, read by each worker with range
            requests and the same GDAL options; credentials from the worker's environment, never
            in the tasks) or STAC items (paths, URLs or pystac Items; one scene each). A URL's output is named by its
            file's stem, a STAC item's by its id; two scenes that would share one are refused.
        out_dir: the output folder (made if missing); it holds the journal and the lock.
        query: a :class:`~napari_sam3.prompts.query.Query` (or one keyword); its vector
            exemplars are encoded once, here, over all the scenes, so every worker applies the
            very same concepts; its post-processing shapes the polygons written.
        settings: a :class:`~napari_sam3.scene.settings.SceneSettings`.
        fmt: a ``--format`` name (``gpkg``, ``geojson``, ..., ``tif``/``cog`` label rasters).
        workers: a ``LocalCluster`` of this many worker processes (one thread each).
        scheduler: the address of a running dask scheduler (``tcp://host:8786``) instead.
        resume: skip the scenes the journal says are finished (same input, same query and
            settings, same format), and continue a scene stopped mid-way from its tile journal.
        overwrite: replace existing outputs; without it (and without ``resume`` covering
            them) an existing output stops the run before anything starts.
        retries: tries after the first for a failed scene.
        simplify: polygon simplification in pixels (as ``write_scene``).
        scheduler_timeout: seconds to wait for ``scheduler`` to answer.
        report: ``callable(path, status, detail)`` per scene as it ends (status ``done`` /
            ``skipped`` / ``failed``), e.g. to print progress; and before anything runs,
            ``replacing`` (detail: the existing output that ``overwrite`` replaces).
        progress: ``callable(path, done, total)`` after every tile of a scene, for runs in this
            process (neither ``workers`` nor ``scheduler``). An exception that is not an
            ``Exception`` (a ``BaseException`` subclass, e.g. a cancel) raised from it stops the
            run: the scene in progress writes nothing and the finished ones stay in the journal.
        options: instead of ``query``/``settings``, their fields as keywords (as
            :func:`~napari_sam3.scene.segment_scene`: prompt, keywords, concept, postprocess,
            tile_size, ...).
    """
    if not isinstance(spec, ConnectionSpec):
        raise InvalidType(
            "spec must be a napari_sam3.client.connection.ConnectionSpec (picklable: every worker "
            f"connects with it), got {type(spec).__name__}"
        )
    from napari_sam3.core.formats import FORMAT_SUFFIXES

    if fmt not in FORMAT_SUFFIXES:
        raise InvalidInput(f"fmt must be one of {', '.join(FORMAT_SUFFIXES)}, got {fmt!r}")
    if workers is not None and scheduler is not None:
        raise InvalidInput(
            "give workers (a local cluster) or scheduler (an existing one), not both"
        )
    if progress is not None and (workers is not None or scheduler is not None):
        raise InvalidInput(
            "progress reports tiles of scenes run in this process: give it without "
            "workers or scheduler"
        )
    if workers is not None and (isinstance(workers, bool) or not 1 <= int(workers) <= 256):
        raise InvalidInput(f"workers must be a number of processes 1..256, got {workers!r}")
    inputs = [_as_scene(p) for p in paths]
    missing = [str(p) for p in inputs if isinstance(p, Path) and not p.is_file()]
    if missing:
        raise MissingFile(f"no such raster: {', '.join(missing[:3])}")
    query, settings = query_and_settings(query, settings, options)
    if query.postprocess is not None and not query.postprocess.steps:
        query = query.replace(postprocess=None)
    out = Path(out_dir)
    targets = plan_targets(inputs, out, fmt)
    local = [p for p in inputs if isinstance(p, Path)]
    refuse_inputs(
        [*targets.values(), out / JOURNAL, out / LOCK], {"raster": local, **query.files()}
    )
    if query.exemplars is not None:  # encoded once, here: every worker gets the same concepts
        from napari_sam3.scene.driver import with_exemplar_concepts

        client = spec.connect()
        try:
            query = with_exemplar_concepts(client, query, inputs, settings)
        finally:
            client.close()
    key = run_key(query, settings, fmt, simplify)
    result = BatchResult(out)
    note = report or (lambda path, status, detail: None)

    with folder_lock(writable_folder(out)):
        journal = load_journal(out)
        scenes = journal["scenes"]
        todo = []
        for path in inputs:
            entry = scenes.get(scene_key(path))
            if resume and _finished(entry, path, targets[path], key, settings.assets):
                result.skipped[_label(path)] = entry
                note(path, "skipped", entry)
            else:
                todo.append(path)
        partial = [p for p in todo if journal_path(targets[p]).exists()]
        if partial and not (resume or overwrite):
            raise OutputExists(unfinished(journal_path(targets[partial[0]]), targets[partial[0]]))
        clash = [p for p in todo if targets[p].exists()]
        if clash and not overwrite:
            raise OutputExists(
                f"{', '.join(str(targets[p]) for p in clash[:3])} exists and the journal does "
                "not show it finished with these options; pass overwrite (--overwrite) to "
                "replace it"
            )
        for path in clash:  # said before anything runs: which files overwrite replaces
            note(path, "replacing", targets[path])

        def finish(path: Path, summary: dict | None, error: str | None) -> None:
            """Record one scene: the journal first, then the report (a Ctrl-C between them
            leaves a journal that matches the folder; finishing again is harmless)."""
            entry = {
                "input": scene_fingerprint(path, settings.assets),
                "options": key,
                "output": targets[path].name,
            }
            if error is None:
                entry.update(status="done", **summary)
            else:
                entry.update(status="failed", error=error)
            scenes[scene_key(path)] = entry
            _write_journal(out, journal)
            if error is None:
                result.done[_label(path)] = entry
                note(path, "done", entry)
            else:
                result.failed[_label(path)] = error
                note(path, "failed", error)

        if workers is not None and settings.memory_budget is None:
            settings = settings.replace(memory_budget=worker_budget(int(workers)))
        args = (query, settings, overwrite, simplify, fmt == "cog", resume)
        if workers is None and scheduler is None:
            for path in todo:
                tiles = None if progress is None else functools.partial(progress, path)
                summary, error = _serial(spec, path, targets[path], (*args, tiles), retries)
                finish(path, summary, error)
        else:
            _on_dask(spec, todo, targets, args, retries, workers, scheduler,
                     scheduler_timeout, finish)  # fmt: skip
    return result


def worker_budget(workers: int, available: int | None = None) -> int:
    """Each of a local cluster's workers' scene memory budget by default: the machine's default
    budget (:func:`~napari_sam3.scene.budget.default_budget`) shared among them."""
    from napari_sam3.scene.budget import MIN_BUDGET, default_budget

    return max(MIN_BUDGET, default_budget(available) // max(1, workers))


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _label(path: Any) -> str:
    """A scene as BatchResult names it: its path or URL, or a STAC item's key."""
    return str(path) if isinstance(path, str | os.PathLike) else scene_key(path)


def _sent(path: Any) -> Any:
    """A scene as a task carries it: a path or URL as a str (an item a search found keeps the
    item it holds, so the worker does not ask the API again), a pystac Item as it is."""
    return os.fspath(path) if isinstance(path, str | os.PathLike) else path


def _serial(spec, path, target, args, retries) -> tuple[dict | None, str | None]:
    error = None
    for attempt in range(retries + 1):
        # a try after the first continues the tile journal the failed one left (this run's
        # own: without resume it would be refused as an unfinished output, hiding the error)
        tried = args if attempt == 0 else _resuming(args)
        try:
            return segment_one(spec, _sent(path), str(target), *tried), None
        except Exception as exc:  # reported per scene; the batch goes on
            error = _describe(exc)
    return None, error


def _resuming(args: tuple) -> tuple:
    """`segment_one`'s arguments after (spec, path, target) with ``resume`` set: (query,
    settings, overwrite, simplify, cog, resume, progress...)."""
    return (*args[:5], True, *args[6:])


class Stopped(BaseException):
    """Raised between two tiles of a scene to stop it: it writes nothing. A BaseException, so
    the tries of `_serial` do not take it for a failure."""


class _StopCheck:
    """A scene's tile callback on a worker: raises `Stopped` once the run's dask Event is set."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, done: int = 0, total: int = 0) -> None:
        from distributed import Event

        if Event(self.name).is_set():
            raise Stopped


def _task(spec, path, target, args, retries, stop: str) -> tuple[dict | None, str | None]:
    """One scene on a worker; (None, None) when the run was stopped before it finished."""
    check = _StopCheck(stop)
    try:
        check()
        return _serial(spec, path, target, (*args, check), retries)
    except Stopped:
        return None, None


def _on_dask(spec, todo, targets, args, retries, workers, scheduler, timeout, finish) -> None:
    """The scenes as dask tasks. On Ctrl-C (KeyboardInterrupt) the tasks stop at their next
    tile, writing nothing; those that finished first are recorded; then the interrupt goes on.
    A second Ctrl-C stops at once (the local workers are ended; their temporary files removed)."""
    from distributed import Event, as_completed, wait

    try:
        with dask_client(workers, scheduler, timeout) as client:
            stop = Event(f"napari-sam3-stop-{os.getpid()}-{time.time_ns()}", client=client)
            futures = {}
            for path in todo:
                # the tries run in the worker and a failure comes back as its one-line reason
                # (dask would log a traceback, and wrap an exception it cannot unpickle)
                future = client.submit(
                    _task,
                    spec,
                    _sent(path),
                    targets[path],
                    args,
                    retries,
                    stop.name,
                    key=f"segment-{targets[path].stem}-{os.getpid()}-{time.time_ns()}",
                    pure=False,
                )
                futures[future] = path
            done: set = set()

            def record(future) -> None:
                try:
                    summary, error = future.result()
                except Exception as error_:  # the worker itself was lost
                    summary, error = None, _describe(error_)
                if summary is not None or error is not None:
                    finish(futures[future], summary, error)
                done.add(future)  # only now: one interrupted while recorded is recorded again

            try:
                for future in as_completed(futures):
                    record(future)
            except KeyboardInterrupt:
                stop.set()
                rest = [f for f in futures if f not in done]
                with contextlib.suppress(TimeoutError):  # a lost worker: stop without it
                    wait(rest, timeout=STOP_SECONDS)  # each stops at its next tile
                for future in rest:
                    if future.done():
                        record(future)
                raise
    except KeyboardInterrupt:
        for path in todo:  # a worker ended mid-write (a second Ctrl-C) leaves its temporary
            remove_temporaries(targets[path])
        raise

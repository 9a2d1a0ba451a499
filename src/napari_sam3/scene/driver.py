"""One scene, start to file: segment, add the model's provenance, write atomically.

The CLI's serial loop, each task of a batch (:mod:`~napari_sam3.scene.batch`) and the QGIS
worker all run a scene through :func:`segment_to_file`, so a scene's output is the same whichever
front end made it; the CLI's merged layer uses :func:`segment_with_provenance` and writes once.
:func:`segment_to_file` journals every finished tile beside its output
(:mod:`~napari_sam3.scene.journal`) and removes the journal once the output is written, so a run
that is killed resumes (``resume=True``, ``--resume``) where it stopped.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from napari_sam3.core.errors import FileSystemError, OutputExists
from napari_sam3.core.files import check_target
from napari_sam3.prompts.query import Query
from napari_sam3.scene.journal import journal_path, journaled_tiles, unfinished
from napari_sam3.scene.output import refuse_inputs, write_scene
from napari_sam3.scene.run import Progress, segment_scene
from napari_sam3.scene.settings import SceneSettings

__all__ = ["SceneOutcome", "segment_to_file", "segment_with_provenance", "with_exemplar_concepts"]

PathLike = str | os.PathLike


@dataclass
class SceneOutcome:
    """What one scene gave: the result table (with provenance), where it went, and how long."""

    frame: pd.DataFrame
    output: Path | None
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """Objects per keyword."""
        df = self.frame
        counts = df.groupby("keyword").size().to_dict() if len(df) else {}
        return {str(k): int(v) for k, v in counts.items()}

    def summary(self) -> dict[str, Any]:
        """A JSON-able record of the run (what the batch journal and the QGIS worker keep)."""
        timings = dict(self.frame.attrs.get("timings", {}))
        timings["write"] = self.frame.attrs.get("write_seconds", 0.0)
        return {
            "features": len(self.frame),
            "counts": self.counts,
            "seconds": self.seconds,
            "timings": timings,
            "tiles": len(self.frame.attrs.get("tiles", ())),
            "warnings": self.warnings[:5],
        }


def with_exemplar_concepts(
    client: Any, query: Query, sources: Sequence[Any], settings: SceneSettings
) -> Query:
    """The query with its vector exemplars turned into concepts: one per scene tile they fall
    in, over all ``sources`` (so every scene of a batch gets the very same concepts)."""
    if query.exemplars is None:
        return query
    from napari_sam3.scene.exemplars import scene_exemplar_concepts

    encoded = scene_exemplar_concepts(
        client,
        list(sources),
        query.exemplars,
        tile_size=settings.tile_size,
        overlap=settings.overlap,
        bands=settings.bands,
        nodata=settings.nodata,
    )
    return query.replace(exemplars=None, concepts=(*query.concepts, *encoded))


def segment_with_provenance(
    client: Any,
    source: Any,
    query: Query,
    settings: SceneSettings | None = None,
    progress: Progress = False,
    name: str | None = None,
    journal: PathLike | None = None,
    resume: bool = False,
    cluster: Any = None,
) -> pd.DataFrame:
    """:func:`segment_scene`, with the model's provenance columns (and ``source`` = ``name``);
    ``cluster``: its tiles as tasks of a :class:`~napari_sam3.scene.cluster.SceneCluster`."""
    from napari_sam3.gis.vector import add_provenance

    df = segment_scene(
        client, source, query, settings, progress=progress, journal=journal, resume=resume,
        cluster=cluster,
    )  # fmt: skip
    df = add_provenance(df, client.manifest)
    if name is not None:
        df["source"] = name
    return df


def segment_to_file(
    client: Any,
    source: Any,
    target: PathLike,
    query: Query,
    settings: SceneSettings | None = None,
    *,
    overwrite: bool = False,
    simplify: float = 0.0,
    cog: bool = False,
    progress: Progress = False,
    name: str | None = None,
    resume: bool = False,
    journal: PathLike | bool | None = None,
    cluster: Any = None,
) -> SceneOutcome:
    """Segment one scene and write it to ``target`` (format by suffix, as
    :func:`~napari_sam3.scene.write_scene`; the query's post-processing on the polygons), with
    the model's provenance, atomically. No output may replace an input: the raster, the
    query's exemplar layer or concept files. The warnings raised on the way are collected.

    Every finished tile is journaled in ``journal`` (default
    :func:`~napari_sam3.scene.journal.journal_path`: ``<target>.napari-sam3-partial``; False:
    none), which is removed once ``target`` is written. ``resume``: continue the run a journal
    there holds (refused, naming what differs, when it was made by another query, settings,
    model or raster); the output is the uninterrupted run's. Without ``resume``, a journal
    there is an unfinished output: refused unless ``overwrite``, which starts afresh.
    ``cluster``: the scene's tiles run as tasks of a
    :class:`~napari_sam3.scene.cluster.SceneCluster`; the output is the same.
    """
    target = Path(target)
    rasters = list(source) if isinstance(source, list | tuple) else [source]
    rasters = [r for r in rasters if isinstance(r, str | os.PathLike)]
    refuse_inputs([target], {"raster": rasters, **query.files()})
    book = (
        None
        if journal is False
        else journal_path(target)
        if journal in (None, True)
        else Path(journal)
    )
    check_target(target, overwrite)
    if book is not None and book.exists() and not (resume or overwrite):
        raise OutputExists(unfinished(book, target))
    t0 = time.perf_counter()
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            df = segment_with_provenance(
                client, source, query, settings, progress, name, journal=book, resume=resume,
                cluster=cluster,
            )  # fmt: skip
            t1 = time.perf_counter()
            try:
                # a pystac Item is written from the band files the run read (df.attrs)
                raster = source if isinstance(source, str | os.PathLike | list | tuple) else None
                written = write_scene(
                    df, target, raster, overwrite, simplify, cog, postprocess=query.postprocess
                )
            except FileSystemError as error:
                if book is None:
                    raise
                raise FileSystemError(
                    f"{error}; the {journaled_tiles(book)} finished tiles are kept in {book}: "
                    "run again with resume (--resume) to write them without segmenting again"
                ) from error
    except BaseException:
        _warn_again(caught)  # a failed scene's warnings may say why
        raise
    if book is not None:
        shutil.rmtree(book, ignore_errors=True)
    _warn_again([w for w in caught if not issubclass(w.category, UserWarning)])
    df.attrs["write_seconds"] = time.perf_counter() - t1
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    return SceneOutcome(df, written, time.perf_counter() - t0, list(dict.fromkeys(messages)))


def _warn_again(records: list) -> None:
    for w in records:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

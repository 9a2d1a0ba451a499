"""Scenes of one place at several dates -> what changed: segment every date with one query on
one grid, compare consecutive dates, and write one layer.

:func:`change_between` is the library entry (the CLI, the napari Change tab and the QGIS worker
call it; it prints nothing and returns the table and a :class:`ChangeSummary`);
:func:`change_to_file` adds the refusals before a run and the atomic write.

With more than two dates, each consecutive pair is compared and the rows of all steps form one
table: ``step`` (1 for the first pair), ``before_date``, ``after_date``, ``track`` (one id for
the rows that are one object across steps: a row's after objects are the next step's before
objects) and ``history`` (the track's class at every step, e.g. ``same>changed>gone``; ``-``
where the track has no row, as before it was built). Filter by ``step`` for a map of one
interval, by ``track`` to follow one object.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

from napari_sam3.change.classify import CHANGE_CLASSES, compare
from napari_sam3.change.grid import common_grid, fill_region, scene_name, warp_onto
from napari_sam3.core.errors import InvalidInput
from napari_sam3.core.formats import OUTPUT_FORMATS, VECTOR_FORMATS
from napari_sam3.prompts.query import Query
from napari_sam3.scene.settings import SceneSettings

__all__ = ["ChangeSummary", "change_between", "change_to_file", "check_output", "write_changes"]

PathLike = str | os.PathLike
# the layer of a change file (a GeoPackage's layer name)
LAYER = "changes"


@dataclass(frozen=True)
class ChangeSummary:
    """Counts and areas (m²) per step, keyword and class; ``lines()`` says them."""

    dates: tuple[str, ...]
    # (step, keyword) -> class -> (count, area in m²)
    counts: dict[tuple[int, str], dict[str, tuple[int, float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, table: pd.DataFrame, dates: Sequence[str]) -> ChangeSummary:
        counts: dict[tuple[int, str], dict[str, tuple[int, float]]] = {}
        area = table["after_area_m2"].where(table["after_area_m2"].notna(), table["before_area_m2"])
        for (step, keyword, change), rows in table.assign(_area=area).groupby(
            ["step", "keyword", "change"], sort=True
        ):
            counts.setdefault((int(step), str(keyword)), {})[str(change)] = (
                len(rows),
                float(rows["_area"].sum()),
            )
        return cls(tuple(dates), counts)

    def lines(self) -> list[str]:
        """One line per step and keyword: ``2017 -> 2018: building: 3 new (1,200 m²), ...``."""
        out = []
        for (step, keyword), classes in sorted(self.counts.items()):
            parts = []
            for c in CHANGE_CLASSES:
                n, area = classes.get(c, (0, 0.0))
                parts.append(f"{n} {c}" + ("" if c == "same" else f" ({area:,.0f} m²)"))
            label = keyword or "(no keyword)"
            out.append(
                f"{self.dates[step - 1]} -> {self.dates[step]}: {label}: " + ", ".join(parts)
            )
        if not out:
            out.append(f"{' -> '.join(self.dates)}: no object on any date")
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: ``{"dates": [...], "steps": [{"step", "keyword", class: {"count",
        "area_m2"}}]}`` (what the QGIS worker reports)."""
        steps = []
        for (step, keyword), classes in sorted(self.counts.items()):
            row: dict[str, Any] = {"step": step, "keyword": keyword}
            for c in CHANGE_CLASSES:
                n, area = classes.get(c, (0, 0.0))
                row[c] = {"count": n, "area_m2": area}
            steps.append(row)
        return {"dates": list(self.dates), "steps": steps}


def change_between(
    client: Any,
    sources: Sequence[Any],
    query: Query,
    settings: SceneSettings | None = None,
    *,
    dates: Sequence[str] | None = None,
    iou: float = 0.3,
    distance: float | None = None,
    changed_iou: float = 0.5,
    area_factor: float = 1.5,
    edge: float | None = None,
    progress: bool | Callable[[int, int], Any] = False,
) -> tuple[gpd.GeoDataFrame, ChangeSummary]:
    """What changed across ``sources`` (two or more scenes of one place, earliest first: files,
    URLs, STAC items, or lists of single-band files).

    Every date is segmented with the same ``query`` (vector exemplars become concepts once, on
    all dates) and ``settings`` on the first date's grid (at ``settings.gsd`` when given; the
    later dates warped onto it, :mod:`~napari_sam3.change.grid`), over the ground all dates
    cover (and ``settings.aoi``), each with its own stretch. Consecutive dates are compared
    (:func:`~napari_sam3.change.compare`: ``iou``, ``distance``, ``changed_iou``,
    ``area_factor``); objects within ``edge`` metres (default: one grid pixel) of the footprint's
    boundary or of either date's fill are ``unknown``.

    ``dates``: a label per source (default the file names). ``progress``: True for bars, or
    ``callable(done, total)`` over the tiles of every date.

    Returns (the table of :func:`~napari_sam3.change.compare` with ``step``, ``before_date``,
    ``after_date``, ``track``, ``history`` and the model's provenance, in the first date's CRS;
    the :class:`ChangeSummary`). Refused (``InvalidInput``): fewer than two sources, a scene
    without a CRS or one that cannot be placed in the first's, no common ground, a date with
    no valid pixel there.
    """
    from napari_sam3.gis.vector import add_provenance
    from napari_sam3.imagery.stac import scene_source
    from napari_sam3.scene.driver import segment_with_provenance, with_exemplar_concepts
    from napari_sam3.scene.output import scene_geodataframe

    settings = settings or SceneSettings()
    if not isinstance(query, Query):
        raise InvalidInput(f"query must be a Query, got {type(query).__name__}")
    if len(sources) < 2:
        raise InvalidInput(f"change needs two scenes or more (earliest first), got {len(sources)}")
    names = [scene_name(s) for s in sources]
    dates = tuple(str(d) for d in dates) if dates is not None else tuple(names)
    if len(dates) != len(sources):
        raise InvalidInput(f"{len(dates)} date labels for {len(sources)} scenes; give one each")
    if len(set(dates)) != len(dates):
        raise InvalidInput(f"the date labels {list(dates)} repeat; give each date its own")
    read = [scene_source(s, settings.assets) for s in sources]
    query = with_exemplar_concepts(client, query, read, settings)
    grid = common_grid(read, names, settings.gsd, settings.aoi)
    edge = grid.pixel if edge is None else edge
    edge = 0.0 if not np.isfinite(edge) else float(edge)
    tables, fills = [], []
    run = settings.replace(aoi=None, gsd=None)  # both are the grid's now
    with tempfile.TemporaryDirectory(prefix="sam3-change-") as folder:
        on_grid = [warp_onto(s, grid, Path(folder), f"date{i}") for i, s in enumerate(read)]
        for src, name in zip(on_grid, names, strict=True):
            fills.append(fill_region(src, grid, name, bands=run.bands, nodata=run.nodata))
        report = _Progress(progress, client, on_grid, run)
        for i, (src, name) in enumerate(zip(on_grid, names, strict=True)):
            df = segment_with_provenance(client, src, query, run, report.date(i), name)
            gdf = scene_geodataframe(df)
            if query.postprocess is not None:
                from napari_sam3.gis.post import postprocess

                gdf = postprocess(gdf, query.postprocess)
            tables.append(gdf)
    steps = []
    for k in range(len(tables) - 1):
        table = compare(
            tables[k],
            tables[k + 1],
            iou=iou,
            distance=distance,
            changed_iou=changed_iou,
            area_factor=area_factor,
            footprint=grid.footprint,
            edge=edge,
            fill=[fills[k], fills[k + 1]],
        )
        table.insert(0, "step", k + 1)
        table.insert(1, "before_date", dates[k])
        table.insert(2, "after_date", dates[k + 1])
        steps.append(table)
    table = gpd.GeoDataFrame(pd.concat(steps, ignore_index=True), crs=steps[0].crs)
    table["before_geometry"] = gpd.GeoSeries(table["before_geometry"], crs=steps[0].crs)
    table = _tracks(table, len(dates) - 1)
    table = gpd.GeoDataFrame(add_provenance(table, client.manifest), crs=table.crs)
    table.attrs["footprint"] = grid.footprint
    table.attrs["fills"] = fills
    return table, ChangeSummary.of(table, dates)


def write_changes(table: gpd.GeoDataFrame, path: PathLike, overwrite: bool = False) -> Path:
    """Write a :func:`change_between` or :func:`~napari_sam3.change.compare` table, atomically,
    by the file's suffix: one layer (``changes`` in a GeoPackage) whose geometry is the row's
    ``geometry`` and whose ``before_wkt`` column holds ``before_geometry`` as WKT text (a file
    holds one geometry column; in QGIS, *Geometry by expression* ``geom_from_wkt("before_wkt")``
    draws it). Shapefiles are refused: their text fields stop at 254 characters."""
    from napari_sam3.gis.vector import write_vector

    path = Path(path)
    check_output(path)
    out = table.copy()
    if "before_geometry" in out.columns:
        geoms = gpd.GeoSeries(out["before_geometry"], crs=table.crs).to_numpy()
        digits = 3 if table.crs is not None and table.crs.is_projected else 9
        out["before_wkt"] = [
            "" if g is None or g.is_empty else shapely.to_wkt(g, rounding_precision=digits)
            for g in geoms
        ]
        out = out.drop(columns="before_geometry")
    return write_vector(
        gpd.GeoDataFrame(out, crs=table.crs), path, overwrite=overwrite, layer=LAYER
    )


def change_to_file(
    client: Any,
    sources: Sequence[Any],
    target: PathLike,
    query: Query,
    settings: SceneSettings | None = None,
    *,
    overwrite: bool = False,
    **options: Any,
) -> tuple[gpd.GeoDataFrame, ChangeSummary, Path]:
    """:func:`change_between` (``options``: its keywords) written to ``target`` with
    :func:`write_changes`; refused before any run when ``target`` is one of the inputs (the
    rasters, the query's exemplar or concept files), exists without ``overwrite``, or is not a
    vector format a change layer fits in."""
    from napari_sam3.core.files import check_target
    from napari_sam3.scene.output import refuse_inputs

    target = Path(target)
    rasters = []
    for s in sources:
        rasters += [
            p
            for p in (s if isinstance(s, list | tuple) else [s])
            if isinstance(p, str | os.PathLike)
        ]
    refuse_inputs([target], {"raster": rasters, **query.files()})
    check_output(target)
    check_target(target, overwrite)
    table, summary = change_between(client, sources, query, settings, **options)
    return table, summary, write_changes(table, target, overwrite)


# ----------------------------------------------------------------------------- internals


def check_output(path: Path) -> None:
    suffix = path.suffix.lower()
    fits = [s for s, driver in VECTOR_FORMATS.items() if driver != "ESRI Shapefile"]
    if suffix not in fits:
        labels = ", ".join(
            f"{f.suffix} ({f.label})"
            for f in OUTPUT_FORMATS.values()
            if f.vector and f.driver != "ESRI Shapefile"
        )
        why = (
            "a Shapefile's text fields stop at 254 characters, too short for the earlier outline"
            if VECTOR_FORMATS.get(suffix) == "ESRI Shapefile"
            else "a change layer is polygons with attributes"
        )
        raise InvalidInput(f"cannot write changes to {path.name!r}: {why}; write {labels}")


def _tracks(table: gpd.GeoDataFrame, steps: int) -> gpd.GeoDataFrame:
    """``track`` and ``history``: rows joined across steps through the objects of the date
    between them (a row's after ids are the next step's before ids)."""
    parent = list(range(len(table)))

    def root(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    step = table["step"].to_numpy()
    for k in range(1, steps):
        ends = {}
        for r in np.flatnonzero(step == k):
            for i in filter(None, table["after_ids"].iat[r].split(",")):
                ends[(table["keyword"].iat[r], i)] = r
        for r in np.flatnonzero(step == k + 1):
            for i in filter(None, table["before_ids"].iat[r].split(",")):
                other = ends.get((table["keyword"].iat[r], i))
                if other is not None:
                    parent[root(r)] = root(other)
    roots = np.array([root(r) for r in range(len(table))])
    _, track = np.unique(roots, return_inverse=True)
    table = table.copy()
    table["track"] = track.astype(np.int64) + 1
    history = {}
    for t, rows in (
        pd.Series(np.arange(len(table))).groupby(table["track"].to_numpy()).indices.items()
    ):
        by_step = {}
        for r in rows:
            by_step.setdefault(int(step[r]), []).append(table["change"].iat[r])
        history[t] = ">".join(
            "/".join(sorted(set(by_step[k]))) if k in by_step else "-" for k in range(1, steps + 1)
        )
    table["history"] = table["track"].map(history)
    return table


class _Progress:
    """``progress`` for each date's run: as given, or ``callable(done, total)`` over the tiles of
    every date."""

    def __init__(self, progress, client, sources, settings: SceneSettings):
        self.progress = progress
        self.offsets = [0]
        if callable(progress) and progress is not True:
            from napari_sam3.scene.run import tile_plan

            for src in sources:
                self.offsets.append(self.offsets[-1] + len(tile_plan(client, src, settings).run))

    def date(self, i: int):
        if not callable(self.progress) or self.progress is True:
            return self.progress
        total, offset = self.offsets[-1], self.offsets[i]
        return lambda done, _total: self.progress(offset + done, total)

"""Matched objects -> what changed: one row per object (or per match of pieces) with its class.

Classes (:data:`CHANGE_CLASSES`):

- ``new``: only on the after date; ``gone``: only on the before date;
- ``changed``: matched, but the IoU is below ``changed_iou`` or the area grew or shrank by more
  than ``area_factor``;
- ``same``: matched, overlapping at least ``changed_iou``, area within ``area_factor``;
- ``unknown``: whatever the match, an object that cannot be judged: outside the common footprint
  (``reason`` ``outside``), within ``edge`` metres of its boundary (``edge``), or within
  ``edge`` metres of either date's fill or nodata (``fill``: a cloud mask, a swath edge). These
  are never counted as change.

The row's geometry is the after object (the before one for ``gone``), in the before table's
CRS; the before object of a match is the ``before_geometry`` column (a second GeoSeries; a file
holds one geometry column, so :func:`~napari_sam3.change.run.write_changes` writes it as WKT
text, ``before_wkt``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

from napari_sam3.change.match import Match, match_objects, prepare, working_crs
from napari_sam3.core import validate
from napari_sam3.core.columns import CHANGE_COLUMNS
from napari_sam3.core.errors import InvalidInput

__all__ = ["CHANGE_CLASSES", "compare"]

CHANGE_CLASSES = ("new", "gone", "changed", "same", "unknown")


def compare(
    before: gpd.GeoDataFrame,
    after: gpd.GeoDataFrame,
    *,
    iou: float = 0.3,
    distance: float | None = None,
    changed_iou: float = 0.5,
    area_factor: float = 1.5,
    footprint: Any = None,
    edge: float = 0.0,
    fill: Any = None,
) -> gpd.GeoDataFrame:
    """What changed between two detection tables of one place (the polygons a scene run writes:
    ``scene_geodataframe``, or its file read back), in any CRS each.

    Args:
        before, after: GeoDataFrames with a CRS; ``keyword`` (objects match only within one
            keyword or concept; all one kind without it), ``score`` and ``label_id`` are used
            where present (``label_id`` defaults to the row number + 1), and ``source``.
        iou: the overlap (intersection over union) a pair needs to be a candidate match.
        distance: metres; pairs whose centres lie this close are candidates too (a moved
            object is then ``changed`` rather than ``gone`` and ``new``). Default: IoU only.
        changed_iou: a match overlapping less than this is ``changed``.
        area_factor: a match whose area grew or shrank by more than this factor is ``changed``.
        footprint: where both dates were seen (a shapely geometry in the before table's CRS,
            or a GeoSeries/GeoDataFrame in any CRS); objects outside it or near its boundary
            are ``unknown``. Default: no limit.
        edge: metres; objects this close to the footprint's boundary or to ``fill`` are
            ``unknown`` (0: touching it).
        fill: where either date has no valid pixels (geometries as ``footprint``; several are
            joined); objects touching it are ``unknown``, never ``gone``.

    Returns:
        One row per object, or per match of pieces (:mod:`~napari_sam3.change.match`), in the
        columns of :data:`~napari_sam3.core.columns.CHANGE_COLUMNS`: ``change``, ``reason``,
        ``keyword``, ``iou`` (NaN unmatched), ``before_score``/``after_score`` (the best
        piece), ``before_area_m2``/``after_area_m2`` (all pieces), ``before_ids``/``after_ids``
        (the ``label_id`` of each piece, as text: ``"4"``, ``"4,9"``, ``""``),
        ``before_source``/``after_source``, then ``geometry`` (after; before for ``gone``) and
        ``before_geometry``, in the before table's CRS.
    """
    iou = validate.unit_interval("iou", iou, open_low=True)
    changed_iou = validate.unit_interval("changed_iou", changed_iou)
    if not (isinstance(area_factor, int | float) and 1 <= area_factor < float("inf")):
        raise InvalidInput(
            f"area_factor must be a number of at least 1, e.g. 1.5, got {area_factor!r}"
        )
    edge = _metres("edge", edge)
    distance = None if distance is None else _metres("distance", distance)
    crs = working_crs(before, after)
    before, b_geoms, b_area = prepare(before, crs, "before")
    after, a_geoms, a_area = prepare(after, crs, "after")
    keywords = (_keywords(before), _keywords(after))
    matches = match_objects(b_geoms, a_geoms, keywords, iou=iou, distance=distance)
    where = _Limits(footprint, fill, edge, crs, before.crs)
    rows = [
        _row(m, before, after, b_geoms, a_geoms, b_area, a_area, keywords, where) for m in matches
    ]
    table = pd.DataFrame(rows, columns=[*CHANGE_COLUMNS, "_after", "_before"])
    for m_row, m in zip(table.index, matches, strict=True):
        if not m.before or not m.after or table.at[m_row, "change"] == "unknown":
            continue
        ratio = table.at[m_row, "after_area_m2"] / max(table.at[m_row, "before_area_m2"], 1e-12)
        grew = max(ratio, 1 / ratio) if ratio > 0 else float("inf")
        table.at[m_row, "change"] = (
            "changed" if m.iou < changed_iou or grew > area_factor else "same"
        )
    order = {c: i for i, c in enumerate(CHANGE_CLASSES)}
    table["_order"] = table["change"].map(order)
    table = table.sort_values(["_order", "keyword"], kind="stable").drop(columns="_order")
    main = gpd.GeoSeries(
        [a if a is not None else b for a, b in zip(table["_after"], table["_before"], strict=True)],
        crs=crs,
    ).to_crs(before.crs)
    earlier = gpd.GeoSeries(list(table["_before"]), crs=crs).to_crs(before.crs)
    out = gpd.GeoDataFrame(
        table.drop(columns=["_after", "_before"]).reset_index(drop=True),
        geometry=main.reset_index(drop=True),
        crs=before.crs,
    )
    out["before_geometry"] = earlier.reset_index(drop=True)
    return out


class _Limits:
    """The footprint and fill in the working CRS, and which rule an object breaks."""

    def __init__(self, footprint, fill, edge: float, crs, table_crs) -> None:
        self.footprint = _geometry(footprint, crs, table_crs, "footprint")
        self.boundary = None if self.footprint is None else self.footprint.boundary
        self.fill = _geometry(fill, crs, table_crs, "fill")
        self.edge = edge
        for g in (self.footprint, self.boundary, self.fill):
            if g is not None:
                shapely.prepare(g)

    def reason(self, geoms: list) -> str:
        """'' when every geometry can be judged, else why not (outside, edge, fill)."""
        for g in geoms:
            if self.footprint is not None and not self.footprint.intersects(g):
                return "outside"
        for g in geoms:
            if self.boundary is not None and self.boundary.dwithin(g, self.edge):
                return "edge"
        for g in geoms:
            if self.fill is not None and self.fill.dwithin(g, self.edge):
                return "fill"
        return ""


def _row(m: Match, before, after, b_geoms, a_geoms, b_area, a_area, keywords, where) -> list:
    b_geom = shapely.union_all(b_geoms[m.before]) if m.before else None
    a_geom = shapely.union_all(a_geoms[m.after]) if m.after else None
    reason = where.reason([g for g in (b_geom, a_geom) if g is not None])
    if reason:
        change = "unknown"
    else:
        change = "gone" if not m.after else "new" if not m.before else "matched"
    keyword = keywords[0][m.before[0]] if m.before else keywords[1][m.after[0]]
    return [
        change,
        reason,
        keyword,
        m.iou if m.before and m.after else np.nan,
        _best(before, m.before),
        _best(after, m.after),
        float(b_area[m.before].sum()) if m.before else np.nan,
        float(a_area[m.after].sum()) if m.after else np.nan,
        _ids(before, m.before),
        _ids(after, m.after),
        _first(before, m.before, "source"),
        _first(after, m.after, "source"),
        a_geom,
        b_geom,
    ]


def _keywords(table: pd.DataFrame) -> np.ndarray:
    if "keyword" not in table.columns:
        return np.full(len(table), "", dtype=object)
    return table["keyword"].fillna("").astype(str).to_numpy(dtype=object)


def _best(table: pd.DataFrame, rows: list[int]) -> float:
    if not rows or "score" not in table.columns:
        return np.nan
    return float(pd.to_numeric(table["score"].iloc[rows], errors="coerce").max())


def _ids(table: pd.DataFrame, rows: list[int]) -> str:
    ids = table["label_id"].iloc[rows] if "label_id" in table.columns else pd.Series(rows) + 1
    return ",".join(str(int(v)) for v in sorted(ids))


def _first(table: pd.DataFrame, rows: list[int], column: str) -> str:
    if not rows or column not in table.columns:
        return ""
    return str(table[column].iloc[rows[0]])


def _metres(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < float("inf")
    ):
        raise InvalidInput(f"{name} is a distance in metres (0 or more), got {value!r}")
    return float(value)


def _geometry(value: Any, crs, table_crs, name: str):
    """One shapely geometry in ``crs`` from a geometry (in ``table_crs``), a GeoSeries or
    GeoDataFrame (in its own CRS), or several of these (joined); None for None."""
    if value is None:
        return None
    if isinstance(value, gpd.GeoDataFrame):
        value = value.geometry
    if isinstance(value, gpd.GeoSeries):
        series = value if value.crs is not None else value.set_crs(table_crs)
    elif isinstance(value, shapely.Geometry):
        series = gpd.GeoSeries([value], crs=table_crs)
    elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
        parts = [_geometry(v, crs, table_crs, name) for v in value]
        parts = [p for p in parts if p is not None]
        return shapely.union_all(parts) if parts else None
    else:
        raise InvalidInput(
            f"{name} must be a shapely geometry, a GeoSeries or GeoDataFrame, or a list of them; "
            f"got {type(value).__name__}"
        )
    try:
        series = series.to_crs(crs)
    except Exception as error:  # pyproj's many failures, said once
        raise InvalidInput(f"the {name} cannot be reprojected to {crs}: {error}") from None
    return shapely.union_all(shapely.make_valid(series.dropna().to_numpy()))

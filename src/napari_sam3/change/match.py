"""Objects of two dates matched one to one: the same keyword, the best overlap in total.

Both tables are measured in one working CRS (:func:`working_crs`, metres). Candidate pairs come
from a spatial index (an object and the objects of the other date that touch it, or whose
centres lie within ``distance``); the pairs kept are an optimal assignment (the largest total
IoU, :func:`scipy.optimize.linear_sum_assignment`, solved per connected group of candidates), so
a moved object never steals its neighbour's partner as a greedy pass would.

**Pieces.** An object cut in two on one date (a tile seam the scene run could not join, a
building split by a shadow) is one object on the other. One-to-one matching would call the
larger half ``changed`` and the smaller one ``new``. So after the assignment, an object left
unmatched that lies mostly (at least half its area) inside an object of the other date that is
matched joins that match as a further piece, if it raises the match's IoU (the union of the
pieces against the other side). A match thus holds one or more objects of each date; every object
of each date is in exactly one match or alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from napari_sam3.core.errors import InvalidInput, InvalidType
from napari_sam3.gis.vector import local_utm

__all__ = ["Match", "match_objects", "prepare", "working_crs"]

# the share of an unmatched object's area that must lie inside a matched object of the other
# date for it to join that match as a piece
PIECE_INSIDE = 0.5
# the weight a pair found by distance alone gets (scaled by how close): below any real overlap
_NEAR = 1e-6


@dataclass
class Match:
    """Rows of the before and after tables that are one object (a lone object: one side empty)."""

    before: list[int]
    after: list[int]
    iou: float = float("nan")


def working_crs(before: gpd.GeoDataFrame, after: gpd.GeoDataFrame) -> CRS:
    """The CRS areas, overlaps and distances are measured in: the before table's when it is
    projected in metres and not a Mercator (whose scale grows towards the poles: Web Mercator's
    areas are 2.4 times too large at 50 degrees), else the local UTM zone of both tables."""
    for name, table in (("before", before), ("after", after)):
        if not isinstance(table, gpd.GeoDataFrame):
            raise InvalidType(
                f"{name} must be a GeoDataFrame of detections (scene_geodataframe, or a layer "
                f"read with geopandas), got {type(table).__name__}"
            )
        if table.crs is None:
            raise InvalidInput(
                f"the {name} table has no CRS, so its objects cannot be placed beside the other "
                "date's; give both tables a CRS (gdf.set_crs(...)) or segment georeferenced rasters"
            )
    crs = CRS.from_user_input(before.crs)
    if crs.is_projected and _metres(crs) and not _mercator(crs):
        return crs
    both = pd.concat(
        [before.geometry.to_crs(4326), _to(after.geometry, 4326, "after", "EPSG:4326")],
        ignore_index=True,
    )
    both = gpd.GeoSeries(both.dropna(), crs=4326)
    if not len(both) or both.is_empty.all():
        return CRS.from_epsg(3857) if not crs.is_projected else crs
    try:
        return local_utm(both)
    except IndexError:
        raise InvalidInput("no UTM zone holds these objects; reproject both tables first") from None


def prepare(
    table: gpd.GeoDataFrame, crs: CRS, name: str
) -> tuple[gpd.GeoDataFrame, np.ndarray, np.ndarray]:
    """(``table`` with its index reset, its geometries in ``crs`` (repaired), their areas)."""
    table = table.reset_index(drop=True)
    geoms = _to(table.geometry, crs, name, crs.to_string()).to_numpy()
    bad = ~shapely.is_missing(geoms) & ~shapely.is_valid(geoms)
    if bad.any():
        geoms = geoms.copy()
        geoms[bad] = shapely.make_valid(geoms[bad])
    geoms = np.where(shapely.is_missing(geoms), shapely.Polygon(), geoms)
    return table, geoms, shapely.area(geoms)


def match_objects(
    before: np.ndarray,
    after: np.ndarray,
    keywords: tuple[np.ndarray, np.ndarray],
    *,
    iou: float,
    distance: float | None,
) -> list[Match]:
    """Every object of ``before`` and ``after`` (shapely arrays in one metric CRS) in exactly one
    :class:`Match`: pairs of the same keyword with IoU at least ``iou`` (or centres within
    ``distance``), assigned optimally, then pieces joined; lone objects last."""
    i, j, weight = _candidates(before, after, keywords, iou, distance)
    pairs = _assign(len(before), len(after), i, j, weight)
    matches = [Match([a], [b], _iou(before[[a]], after[[b]])) for a, b in pairs]
    _join_pieces(matches, before, after, keywords)
    used_b = {r for m in matches for r in m.before}
    used_a = {r for m in matches for r in m.after}
    matches += [Match([r], []) for r in range(len(before)) if r not in used_b]
    matches += [Match([], [r]) for r in range(len(after)) if r not in used_a]
    return matches


# ----------------------------------------------------------------------------- internals


def _metres(crs: CRS) -> bool:
    return {a.unit_name for a in crs.axis_info} <= {"metre", "meter"}


def _mercator(crs: CRS) -> bool:
    method = (crs.coordinate_operation.method_name if crs.coordinate_operation else "").lower()
    return "mercator" in method and "transverse" not in method


def _to(geoms: gpd.GeoSeries, crs, name: str, label: str) -> gpd.GeoSeries:
    """``geoms`` in ``crs``; refused where the reprojection fails or leaves no finite point."""
    try:
        out = geoms.to_crs(crs)
    except Exception as error:  # pyproj's many failures: one message that says what to do
        raise InvalidInput(
            f"the {name} objects cannot be reprojected from {geoms.crs} to {label} ({error}); "
            "reproject them to a CRS both dates share first"
        ) from None
    coords = shapely.get_coordinates(out.dropna().to_numpy())
    if len(coords) and not np.isfinite(coords).all():
        raise InvalidInput(
            f"the {name} objects do not fit in {label}: reprojecting them from {geoms.crs} "
            "gives points that are not finite (no usable transformation between the CRSs, or "
            "objects outside where it is defined); reproject them to a CRS both dates share"
        )
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of the union of ``a`` against the union of ``b``."""
    ua, ub = shapely.union_all(a), shapely.union_all(b)
    union = shapely.area(shapely.union(ua, ub))
    return float(shapely.area(shapely.intersection(ua, ub)) / union) if union > 0 else 0.0


def _candidates(before, after, keywords, iou, distance):
    """(before rows, after rows, weights) of the pairs that may match."""
    tree = shapely.STRtree(after)
    if distance is None:
        i, j = tree.query(before, predicate="intersects")
    else:
        i, j = tree.query(before, predicate="dwithin", distance=distance)
    same = keywords[0][i] == keywords[1][j]
    i, j = i[same], j[same]
    inter = shapely.area(shapely.intersection(before[i], after[j]))
    union = shapely.area(before[i]) + shapely.area(after[j]) - inter
    overlap = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    keep = overlap >= iou
    weight = np.where(keep, overlap, 0.0)
    if distance is not None:
        gap = shapely.distance(shapely.centroid(before[i]), shapely.centroid(after[j]))
        near = gap <= distance
        closeness = 1.0 - np.divide(gap, distance, out=np.zeros_like(gap), where=distance > 0)
        weight = np.where(keep, weight, np.where(near, _NEAR * (1.0 + closeness), 0.0))
        keep |= near
    return i[keep], j[keep], weight[keep]


def _assign(n_before: int, n_after: int, i, j, weight) -> list[tuple[int, int]]:
    """The pairs of an assignment with the largest total weight, one connected group of
    candidates at a time (each a small dense problem)."""
    from scipy.optimize import linear_sum_assignment
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not len(i):
        return []
    size = n_before + n_after
    graph = coo_matrix((np.ones(len(i)), (i, n_before + j)), shape=(size, size))
    _, label = connected_components(graph, directed=False)
    pairs = []
    groups = pd.Series(np.arange(len(i))).groupby(label[i]).indices
    for edges in groups.values():
        rows, r = np.unique(i[edges], return_inverse=True)
        cols, c = np.unique(j[edges], return_inverse=True)
        dense = np.zeros((len(rows), len(cols)))
        dense[r, c] = weight[edges]
        for a, b in zip(*linear_sum_assignment(dense, maximize=True), strict=True):
            if dense[a, b] > 0:
                pairs.append((int(rows[a]), int(cols[b])))
    return sorted(pairs)


def _join_pieces(matches: list[Match], before, after, keywords) -> None:
    """Unmatched objects lying mostly inside a matched object of the other date join its match
    (largest first, each only where it raises the match's IoU)."""
    for side, geoms, other, kw_side, kw_other in (
        ("before", before, after, keywords[0], keywords[1]),
        ("after", after, before, keywords[1], keywords[0]),
    ):
        owner = {}  # row of the other date -> its match
        for m in matches:
            for r in m.after if side == "before" else m.before:
                owner[r] = m
        used = {r for m in matches for r in getattr(m, side)}
        loose = [r for r in range(len(geoms)) if r not in used]
        if not loose or not owner:
            continue
        loose.sort(key=lambda r: (-shapely.area(geoms[r]), r))
        tree = shapely.STRtree(other)
        for r in loose:
            area = shapely.area(geoms[r])
            hosts = [
                h
                for h in tree.query(geoms[r], predicate="intersects")
                if h in owner and kw_other[h] == kw_side[r]
            ]
            if area <= 0 or not hosts:
                continue
            inside = shapely.area(shapely.intersection(geoms[r], other[hosts]))
            best = int(np.argmax(inside))
            if inside[best] < PIECE_INSIDE * area:
                continue
            m = owner[hosts[best]]
            rows = getattr(m, side) + [r]
            mb, ma = (rows, m.after) if side == "before" else (m.before, rows)
            joined = _iou(before[mb], after[ma])
            if joined > m.iou:
                m.before, m.after, m.iou = mb, ma, joined

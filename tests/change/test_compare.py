"""compare() on detection tables built from known objects: the classes are exact."""

from __future__ import annotations

import geopandas as gpd
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely.affinity import translate
from shapely.geometry import box

from napari_sam3.change import CHANGE_CLASSES, compare
from napari_sam3.core.columns import CHANGE_COLUMNS
from napari_sam3.core.errors import InvalidInput

X0, Y0 = 330_000, 5_800_000  # the Sentinel-2 sample's corner, EPSG:32633


def table(boxes, crs="EPSG:32633", keyword="building", ids=None):
    """Detections at (x, y, x2, y2) offsets from X0, Y0 (metres)."""
    geoms = [box(X0 + a, Y0 + b, X0 + c, Y0 + d) for a, b, c, d in boxes]
    kw = keyword if isinstance(keyword, list) else [keyword] * len(geoms)
    return gpd.GeoDataFrame(
        {
            "label_id": ids or list(range(1, len(geoms) + 1)),
            "keyword": kw,
            "score": [0.9] * len(geoms),
        },
        geometry=geoms,
        crs="EPSG:32633",
    ).to_crs(crs)


def classes(out) -> dict[tuple[str, str], str]:
    """(before ids, after ids) -> class."""
    return {
        (b, a): c
        for b, a, c in zip(out["before_ids"], out["after_ids"], out["change"], strict=True)
    }


def test_known_objects_get_their_classes():
    before = table([(0, 0, 20, 20), (100, 0, 120, 20), (200, 0, 220, 20), (300, 0, 320, 20)])
    after = table(
        [
            (2, 0, 22, 20),  # 1 moved 2 m: IoU 0.82
            (100, 0, 140, 20),  # 2 twice as large: IoU 0.5, area x2
            (500, 0, 520, 20),  # 3 new
            (300, 0, 320, 20),  # 4 unchanged
            (409, 0, 421, 12),  # 5 new, small
        ]
    )
    out = compare(before, after)
    assert classes(out) == {
        ("1", "1"): "same",
        ("2", "2"): "changed",
        ("3", ""): "gone",
        ("4", "4"): "same",
        ("", "3"): "new",
        ("", "5"): "new",
    }
    assert list(out.columns) == [*CHANGE_COLUMNS, "geometry", "before_geometry"]
    row = out[out["before_ids"] == "2"].iloc[0]
    assert row["iou"] == pytest.approx(0.5)
    assert (row["before_area_m2"], row["after_area_m2"]) == pytest.approx((400, 800))
    gone = out[out["change"] == "gone"].iloc[0]
    assert gone.geometry.equals(box(X0 + 200, Y0, X0 + 220, Y0 + 20))
    assert out[out["change"] == "new"]["before_geometry"].isna().all()


def test_thresholds_decide_same_or_changed():
    before, after = table([(0, 0, 20, 20)]), table([(0, 0, 20, 26)])  # IoU 0.77, area x1.3
    assert compare(before, after)["change"].tolist() == ["same"]
    assert compare(before, after, area_factor=1.2)["change"].tolist() == ["changed"]
    assert compare(before, after, changed_iou=0.8)["change"].tolist() == ["changed"]
    assert sorted(compare(before, after, iou=0.8)["change"]) == ["gone", "new"]


def test_moved_far_is_gone_and_new_unless_a_distance_is_given():
    before, after = table([(0, 0, 20, 20)]), table([(30, 0, 50, 20)])
    assert sorted(compare(before, after)["change"]) == ["gone", "new"]
    out = compare(before, after, distance=35)
    assert classes(out) == {("1", "1"): "changed"}
    assert out["iou"].tolist() == [0.0]
    assert sorted(compare(before, after, distance=25)["change"]) == ["gone", "new"]


def test_matches_only_within_a_keyword():
    before = table([(0, 0, 20, 20)], keyword="building")
    after = table([(0, 0, 20, 20)], keyword="pool")
    out = compare(before, after)
    assert sorted(zip(out["change"], out["keyword"], strict=True)) == [
        ("gone", "building"),
        ("new", "pool"),
    ]


def test_the_assignment_is_optimal_not_greedy():
    """A's best partner is C, but C is B's only one: the largest total pairs A-D and B-C."""
    before = table([(0, 0, 10, 10), (10, 0, 20, 10)])  # A, B
    after = table([(4, 0, 14, 10), (-5, 0, 5, 10)])  # C (A 0.43, B 0.25), D (A 0.33)
    out = compare(before, after, iou=0.2)
    assert classes(out) == {("1", "2"): "changed", ("2", "1"): "changed"}


@pytest.mark.parametrize("halves_on", ["after", "before"])
def test_an_object_cut_by_a_seam_is_one_match(halves_on):
    """Two halves of one object (a seam the scene run did not join) on one date, the whole on
    the other: one row with both halves' ids, never a new or gone half."""
    whole = table([(0, 0, 40, 20)])
    halves = table([(0, 0, 15, 20), (15, 0, 40, 20)])  # a 15 / 25 split
    before, after = (whole, halves) if halves_on == "after" else (halves, whole)
    out = compare(before, after)
    assert len(out) == 1
    row = out.iloc[0]
    assert row["change"] == "same"
    assert row["iou"] == pytest.approx(1.0)
    assert {row["before_ids"], row["after_ids"]} == {"1", "1,2"}
    assert row["before_area_m2"] == pytest.approx(row["after_area_m2"])


def test_a_new_neighbour_is_not_a_piece():
    """A building added beside one that stayed is new: it lies outside the old one."""
    out = compare(table([(0, 0, 20, 20)]), table([(0, 0, 20, 20), (20, 0, 40, 20)]))
    assert classes(out) == {("1", "1"): "same", ("", "2"): "new"}


@pytest.mark.parametrize(
    ("before_crs", "after_crs"),
    [
        ("EPSG:32633", "EPSG:3857"),
        ("EPSG:32633", "EPSG:4326"),
        ("EPSG:4326", "EPSG:3857"),
        ("EPSG:3857", "EPSG:32633"),
    ],
)
def test_the_same_place_in_another_crs_is_same(before_crs, after_crs):
    boxes = [(0, 0, 20, 20), (100, 50, 130, 70), (250, 0, 262, 40)]
    out = compare(table(boxes, before_crs), table(boxes, after_crs))
    assert set(out["change"]) == {"same"}
    assert out["iou"].min() > 0.999
    assert out.crs == before_crs
    # areas in square metres whatever the CRS (Web Mercator's are 2.4 times too large here)
    assert sorted(out["after_area_m2"]) == pytest.approx([400, 480, 600], rel=2e-3)


def test_fill_and_edges_make_unknown_never_gone():
    before = table([(0, 0, 20, 20), (100, 0, 120, 20), (200, 0, 220, 20), (400, 0, 420, 20)])
    after = table([(200, 0, 220, 20)])
    footprint = box(X0 - 50, Y0 - 50, X0 + 300, Y0 + 100)
    cloud = box(X0 + 90, Y0 - 10, X0 + 110, Y0 + 30)  # covers half of object 2 on the after date
    out = compare(before, after, footprint=footprint, fill=[cloud], edge=0)
    got = dict(zip(out["before_ids"], zip(out["change"], out["reason"], strict=True), strict=True))
    assert got == {
        "1": ("gone", ""),
        "2": ("unknown", "fill"),
        "3": ("same", ""),
        "4": ("unknown", "outside"),
    }
    # within 60 m of the footprint's boundary (x = X0 - 50): object 1 too
    near = compare(before, after, footprint=footprint, fill=[cloud], edge=60)
    assert dict(zip(near["before_ids"], near["reason"], strict=True))["1"] == "edge"


def test_tables_without_a_crs_or_in_another_world_are_refused():
    before = table([(0, 0, 20, 20)])
    with pytest.raises(InvalidInput, match="has no CRS"):
        compare(before, before.set_crs(None, allow_override=True))
    mars = gpd.GeoDataFrame(geometry=[box(0, 0, 1, 1)], crs="IAU_2015:49900")
    with pytest.raises(InvalidInput, match="cannot be reprojected"):
        compare(before, mars)
    with pytest.raises(InvalidInput, match="area_factor"):
        compare(before, before, area_factor=0.5)


# -- properties over tables of objects, one per cell and date -------------------------------

CELL = 100
rect = st.tuples(
    st.integers(0, 40), st.integers(0, 40), st.integers(5, 40), st.integers(5, 40)
)  # dx, dy, width, height within a 100 m cell
cell = st.tuples(st.none() | rect, st.none() | rect, st.sampled_from(["a", "b"]), st.booleans())


def tables_of(cells):
    """Before and after tables: each cell holds at most one object a date; the after object's
    keyword differs from the before one's when the cell says so."""
    sides = {"before": ([], []), "after": ([], [])}
    for i, (b, a, kw, other) in enumerate(cells):
        for name, r, k in (
            ("before", b, kw),
            ("after", a, ("b" if kw == "a" else "a") if other else kw),
        ):
            if r is not None:
                dx, dy, w, h = r
                sides[name][0].append((i * CELL + dx, dy, i * CELL + dx + w, dy + h))
                sides[name][1].append(k)
    return [table(boxes, keyword=kws) for boxes, kws in sides.values()]


def rows(out):
    return sorted(zip(out["change"], out["before_ids"], out["after_ids"], strict=True))


@settings(max_examples=60, deadline=None)
@given(st.lists(cell, max_size=12))
def test_identical_tables_are_all_same(cells):
    before, _ = tables_of(cells)
    out = compare(before, before.copy())
    assert set(out["change"]) <= {"same"}
    assert (out["before_ids"] == out["after_ids"]).all()
    assert len(out) == len(before)


@settings(max_examples=60, deadline=None)
@given(st.lists(cell, max_size=12))
def test_swapping_the_dates_swaps_new_and_gone(cells):
    before, after = tables_of(cells)
    swap = {"new": "gone", "gone": "new"}
    forward = rows(compare(before, after))
    backward = sorted((swap.get(c, c), a, b) for c, b, a in rows(compare(after, before)))
    assert forward == backward


@settings(max_examples=60, deadline=None)
@given(st.lists(cell, max_size=12), st.integers(-100_000, 100_000), st.integers(-100_000, 100_000))
def test_moving_both_dates_together_changes_nothing(cells, dx, dy):
    before, after = tables_of(cells)
    footprint = box(X0 + 10, Y0 + 5, X0 + 600, Y0 + 45)

    def moved(t):
        return t.set_geometry(t.geometry.translate(dx, dy))

    here = compare(before, after, footprint=footprint, edge=3)
    there = compare(moved(before), moved(after), footprint=translate(footprint, dx, dy), edge=3)
    assert rows(here) == rows(there)
    assert list(here["reason"]) == list(there["reason"])


@settings(max_examples=60, deadline=None)
@given(st.lists(cell, max_size=12))
def test_the_classes_partition_the_objects(cells):
    before, after = tables_of(cells)
    out = compare(before, after)
    assert set(out["change"]) <= set(CHANGE_CLASSES)
    for side, t in (("before_ids", before), ("after_ids", after)):
        ids = [int(i) for text in out[side] for i in text.split(",") if i]
        assert sorted(ids) == sorted(t["label_id"])
    assert shapely.is_valid(out.geometry.to_numpy()).all()


def test_the_same_place_in_degrees_written_past_180_is_same():
    """Objects in EPSG:4326 with longitudes past 180 (from a raster written in 0..360, the
    Pacific): measured on the local UTM zone as anywhere else, areas in square metres."""
    near_fiji = [(0, 0, 20, 20), (100, 50, 130, 70), (250, 0, 262, 40)]
    utm = gpd.GeoDataFrame(
        {"label_id": [1, 2, 3], "keyword": ["building"] * 3, "score": [0.9] * 3},
        geometry=[box(800_000 + a, 8_150_000 + b, 800_000 + c, 8_150_000 + d)
                  for a, b, c, d in near_fiji],
        crs="EPSG:32760",
    )  # fmt: skip
    degrees = utm.to_crs(4326)
    past = degrees.set_geometry(degrees.geometry.translate(xoff=360.0), crs=4326)
    assert past.total_bounds[0] > 180
    out = compare(past, past)
    assert set(out["change"]) == {"same"}
    assert sorted(out["after_area_m2"]) == pytest.approx([400, 480, 600], rel=2e-3)

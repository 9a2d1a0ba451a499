"""The dock with the warm engine (worker.py --serve, the tiny model) on a real QgsMapCanvas in
EPSG:3857 over the Sentinel-2 crop in EPSG:32633: clicks, the candidates, undo, a refusal,
Accept into a GeoPackage and its undo; keywords in view, exemplars from an EPSG:4326 layer, the
score filter, Export, a cancel. The polygons are compared with the library's own answer on the
same pixels (napari_sam3.scene.canvas, in this process)."""

from __future__ import annotations

import json

import geopandas as gpd
import numpy as np
import pytest
import shapely
from pyproj import Transformer
from shapely import wkt as shapely_wkt
from shapely.geometry import box as shapely_box
from shapely.ops import transform as shapely_transform

from .dock_run import raster_bounds, run_dock

# a point of the crop (EPSG:32633) whose window has three candidates on the tiny model
AIM = (334000.0, 5820000.0)
REFINE = (334150.0, 5819850.0)  # a negative in the same window
OUTSIDE = (331000.0, 5819500.0)  # 1 km west of the crop
BOX = [(333200.0, 5819800.0), (333700.0, 5819300.0), (333700.0, 5819300.0)]  # drag

SETUP = """
layer = load_raster({raster})
dock.raster.setLayer(layer)
dock.connection.setText({repository})
dock.precision.setCurrentText("fp32")
view("EPSG:3857", {extent})
"""

CLICKS = """
analyst = load_vector({target}, "roofs")
dock.target.setLayer(analyst)
dock.command("point")
tool = dock.point_tool
mouse(tool, "release", {aim[0]}, {aim[1]}, "EPSG:32633"); wait()
results = dock.results_layer()
first = dict(shown=features(results), candidates=[dict(c) for c in dock.prompts.candidates],
             points=dock.prompts.points, label=dock.candidate_label.text())
key(tool, "Tab"); wait()  # the second's polygon, asked of the engine
second = dict(shown=features(results), label=dock.candidate_label.text())
key(tool, "Tab"); wait(); key(tool, "Tab"); wait()  # round to the best again
key(tool, "Tab")  # the second again: its polygon already here, nothing asked
again = dict(shown=features(results), busy=dock._job is not None)
key(tool, "Tab"); wait(); key(tool, "Tab")
mouse(tool, "release", {refine[0]}, {refine[1]}, "EPSG:32633", shift=True); wait()
refined = dict(shown=features(results), points=dock.prompts.points)
key(tool, "Backspace"); wait()
undone = dict(shown=features(results), points=dock.prompts.points)
key(tool, "Return")  # keep it: the next click starts a new object
mouse(tool, "release", {outside[0]}, {outside[1]}, "EPSG:32633"); wait()
refused = dict(shown=features(results), points=dock.prompts.points, messages=messages())
key(tool, "Return", ctrl=True)  # Accept
accepted = features(analyst)
analyst.undoStack().undo()
after_undo = features(analyst)
dock.command("box")  # a box on the map: a new object
for kind, (x, y) in zip(("press", "move", "release"), {box}):
    mouse(dock.box_tool, kind, x, y, "EPSG:32633")
wait()
boxed = dict(shown=[f for f in features(results) if f["prompt"] == "box"], box=dock.prompts.box)
report(boxed=boxed, first=first, second=second, again=again, refined=refined, undone=undone, refused=refused,
       accepted=accepted, after_undo=after_undo, messages=messages(),
       pid=engine().pid, restarts=engine().restarts)
"""


@pytest.fixture(scope="module")
def scene(s2_crop, s2_tif):
    """The crop's bounds, and the canvas's extent in EPSG:3857 with 1.5 km around them."""
    left, bottom, right, top = raster_bounds(s2_crop)
    to_3857 = Transformer.from_crs(32633, 3857, always_xy=True)
    xs, ys = to_3857.transform([left - 1500, right, left - 1500, right], [bottom, bottom, top, top])
    return {"raster": json.dumps(str(s2_tif)), "extent": [min(xs), min(ys), max(xs), max(ys)]}


@pytest.fixture(scope="module")
def library(local_client, s2_tif):
    """The library's canvas engine on the same raster, in this process."""
    from napari_sam3.scene.canvas import Canvas

    canvas = Canvas(local_client)
    return canvas, canvas.open(str(s2_tif)).key


def _analyst_layer(path) -> None:
    """The analyst's GeoPackage in EPSG:4326: two roofs of their own, a field of theirs."""
    gpd.GeoDataFrame(
        {"name": ["mine-1", "mine-2"], "score": [1.0, 1.0]},
        geometry=[shapely_box(13.1, 52.5, 13.11, 52.51), shapely_box(13.2, 52.5, 13.21, 52.51)],
        crs=4326,
    ).to_file(path, driver="GPKG")


def _same(a: str, b, tolerance: float = 0.01) -> bool:
    """The same polygon (vertices within `tolerance`, in the CRS's units)."""
    one, other = shapely_wkt.loads(a), b if not isinstance(b, str) else shapely_wkt.loads(b)
    return one.area > 0 and one.hausdorff_distance(other) <= tolerance


def test_a_click_puts_the_librarys_polygon_on_the_canvas_and_accept_is_undoable(
    qgis_env, profile, scene, library, tiny_repository, tmp_path
):
    target = tmp_path / "roofs.gpkg"
    _analyst_layer(target)
    scenario = SETUP.format(repository=json.dumps(str(tiny_repository)), **scene) + CLICKS.format(
        target=json.dumps(str(target)), aim=AIM, refine=REFINE, outside=OUTSIDE, box=BOX
    )
    (out,) = run_dock(qgis_env, profile, scenario, tmp_path)
    canvas, key = library

    # the click, as the library answers the same point (the dock got it in EPSG:32633 from the
    # EPSG:3857 canvas, within a screen pixel of the aim)
    first = out["first"]
    (point,) = first["points"]
    assert np.hypot(point[0] - AIM[0], point[1] - AIM[1]) < 20 and point[2] == 1
    answer = canvas.click(key, [point])
    expected = [
        c if "wkt" in c else canvas.candidate(answer["token"], c["index"])
        for c in answer["candidates"]
    ]
    assert len(expected) == 3 and len(first["candidates"]) == 3
    # the click brings the best one's polygon; the others are listed, their polygons asked later
    best, *others = first["candidates"]
    assert _same(best["wkt"], expected[0]["wkt"]) and all("wkt" not in c for c in others)
    for got, want in zip(first["candidates"], expected, strict=True):
        assert got["score"] == pytest.approx(want["score"])
    (shown,) = first["shown"]  # one object on the map: the best candidate, with provenance
    assert _same(shown["wkt"], expected[0]["wkt"])
    assert shown["score"] == pytest.approx(expected[0]["score"])
    assert (shown["prompt"], shown["source"]) == ("point", "s2.tif")
    assert shown["model"] and shown["created"]
    assert first["label"].startswith("candidate 1 of 3")
    # Tab: the second-ranked candidate replaces it
    (second,) = out["second"]["shown"]
    assert _same(second["wkt"], expected[1]["wkt"])
    assert second["score"] == pytest.approx(expected[1]["score"])
    assert out["second"]["label"].startswith("candidate 2 of 3")
    (again,) = out["again"]["shown"]
    assert _same(again["wkt"], expected[1]["wkt"]) and not out["again"]["busy"]
    # a Shift-click refines the object (the library with both points, from the first result)
    refined = out["refined"]
    assert [p[2] for p in refined["points"]] == [1, 0]
    want = canvas.click(key, refined["points"])["candidates"][0]
    (shown,) = refined["shown"]
    assert _same(shown["wkt"], want["wkt"])
    # undo: back to the first point alone, and its polygon
    (shown,) = out["undone"]["shown"]
    assert out["undone"]["points"] == first["points"] and _same(shown["wkt"], expected[0]["wkt"])
    # a click outside the raster: refused in the message bar, nothing added, no prompt kept
    refused = out["refused"]
    assert len(refused["shown"]) == 1 and refused["points"] == []
    warnings = [m["text"] for m in refused["messages"] if m["level"] == 1]
    assert any("outside" in text for text in warnings), refused["messages"]
    # Accept: the kept polygon added to the analyst's layer in EPSG:4326 (a single-part layer:
    # one feature per part), theirs untouched
    to_4326 = Transformer.from_crs(32633, 4326, always_xy=True).transform
    library_4326 = shapely_transform(to_4326, shapely_wkt.loads(expected[0]["wkt"]))
    accepted = {row["name"]: row for row in out["accepted"]}
    new = [row for row in out["accepted"] if row["name"] is None]
    assert len(out["accepted"]) == 2 + len(new) and {"mine-1", "mine-2"} <= set(accepted)
    assert len(new) == len(getattr(library_4326, "geoms", [library_4326]))
    parts = shapely.union_all([shapely_wkt.loads(row["wkt"]) for row in new])
    assert _same(parts.wkt, library_4326, tolerance=1e-7)  # degrees: about a centimetre
    assert [row["score"] for row in new] == pytest.approx([expected[0]["score"]] * len(new))
    # the layer's undo takes the accept back; the analyst's two features are as they were
    assert sorted(str(row["name"]) for row in out["after_undo"]) == ["mine-1", "mine-2"]
    for row in out["after_undo"]:
        assert shapely.equals(
            shapely_wkt.loads(row["wkt"]), shapely_wkt.loads(accepted[row["name"]]["wkt"])
        )
    assert out["restarts"] == 0
    # a box dragged on the map: the library's answer to that box (in EPSG:32633)
    boxed = out["boxed"]
    assert np.allclose(boxed["box"], [333200, 5819300, 333700, 5819800], atol=20)
    want = canvas.click(key, [], box=boxed["box"])["candidates"][0]
    (shown,) = boxed["shown"]
    assert _same(shown["wkt"], want["wkt"]) and shown["score"] == pytest.approx(want["score"])
    # the dock saved nothing of the analyst's: their file holds their two features alone
    assert sorted(gpd.read_file(target)["name"]) == ["mine-1", "mine-2"]


FIND = """
import time
sent = []
real = engine().request_async
def spy(action, params=None, timeout=None):
    sent.append([action, params])
    return real(action, params, timeout)
engine().request_async = spy
# keywords in the current view (a part of the crop), at the canvas's resolution
view("EPSG:3857", {inner})
dock.keywords.setText("building, pool")
dock.segment(); wait()
results = dock.results_layer()
e = canvas.extent()
in_view = dict(shown=features(results), sent=sent[-1], messages=messages(),
               visible=[e.xMinimum(), e.yMinimum(), e.xMaximum(), e.yMaximum()])
# the score filter: no model run
runs = len(sent)
dock.score.setValue(33)
filtered = dict(count=results.featureCount(), label=dock.count_label.text(), runs=len(sent) - runs)
exported = dock.export({export})
again = dock.export({export})
# zoomed out: the view's resolution is coarser than the raster's: it is the GSD sent
view("EPSG:3857", {outer})
gsd = dock._gsd(True, dock._crs_of_open())
width = canvas.mapSettings().outputSize().width()
e = canvas.extent()
outer_visible = [e.xMinimum(), e.yMinimum(), e.xMaximum(), e.yMaximum()]
# exemplars: selected features of an EPSG:4326 layer, positive and negative
marks = load_vector({marks}, "marks")
dock.exemplar_layer.setLayer(marks)
ids = sorted(f.id() for f in marks.getFeatures())
marks.selectByIds(ids[:2]); dock.add_exemplars(True)
marks.selectByIds(ids[2:]); dock.add_exemplars(False)
dock.keywords.setText("")
dock.scope.setCurrentIndex(1)  # the whole layer
dock.score.setValue(0)
before = results.featureCount()
dock.segment(); wait()
by_exemplars = dict(shown=[f for f in features(results) if f["prompt"] == "exemplars"],
                    sent=sent[-1], exemplars=dock.exemplars, label=dock.exemplar_label.text())
# a cancel while the whole layer runs: nothing added
count = results.featureCount()
dock.forget_exemplars(); dock.keywords.setText("building")
dock.segment()
while dock._job is not None and dock._job.progress <= 0:
    app.processEvents(); time.sleep(0.005)
progress_seen = dock._progress is not None
dock.cancel(); wait()
report(in_view=in_view, filtered=filtered, exported=exported, again=again, gsd=gsd,
       width=width, outer=outer_visible, by_exemplars=by_exemplars, cancelled=dict(
           count_before=count, count=results.featureCount(), messages=messages(),
           progress_bar=progress_seen, sent=sent[-1]))
"""


def test_keywords_in_view_exemplars_from_another_crs_the_score_filter_export_and_cancel(
    qgis_env, profile, scene, library, s2_crop, tiny_repository, tmp_path
):
    left, bottom, right, top = raster_bounds(s2_crop)
    to_3857 = Transformer.from_crs(32633, 3857, always_xy=True)
    inner = [
        *to_3857.transform(left + 500, bottom + 800),
        *to_3857.transform(left + 2500, top - 300),
    ]
    centre = to_3857.transform((left + right) / 2, (bottom + top) / 2)
    outer = [centre[0] - 20000, centre[1] - 20000, centre[0] + 20000, centre[1] + 20000]
    to_4326 = Transformer.from_crs(32633, 4326, always_xy=True).transform
    marks = [shapely_box(left + 400, top - 900, left + 700, top - 600),
             shapely_box(left + 2000, bottom + 500, left + 2200, bottom + 900),
             shapely_box(right - 600, bottom + 300, right - 300, bottom + 600)]  # fmt: skip
    marks_path = tmp_path / "marks.gpkg"
    gpd.GeoDataFrame(
        {"kind": ["a", "b", "c"]}, geometry=[shapely_transform(to_4326, m) for m in marks], crs=4326
    ).to_file(marks_path, driver="GPKG")
    export = tmp_path / "kept.gpkg"
    scenario = SETUP.format(repository=json.dumps(str(tiny_repository)), **scene) + FIND.format(
        inner=inner, outer=outer, marks=json.dumps(str(marks_path)), export=json.dumps(str(export))
    )
    (out,) = run_dock(qgis_env, profile, scenario, tmp_path)
    canvas, key = library

    # keywords in view: the view's extent in the raster's CRS, native resolution (the canvas
    # is finer), both keywords on one pass; the library's rows for the same request
    action, sent = out["in_view"]["sent"]
    assert action == "segment" and sent["keywords"] == "building, pool" and sent["gsd"] is None
    to_32633 = Transformer.from_crs(3857, 32633, always_xy=True).transform
    visible = out["in_view"]["visible"]  # the canvas's extent (the 800 x 600 view's shape)
    assert shapely_box(*visible).contains(shapely_box(*inner).buffer(-1))
    view_box = shapely_transform(to_32633, shapely.segmentize(shapely_box(*visible), 10))
    assert np.allclose(sent["extent"], view_box.bounds, atol=1.0)
    want = canvas.segment(key, keywords=["building", "pool"], extent=sent["extent"],
                          score_thr=sent["score_thr"])["features"]  # fmt: skip
    shown = out["in_view"]["shown"]
    assert len(shown) == len(want) > 0 and {r["keyword"] for r in shown} <= {"building", "pool"}
    for got, row in zip(
        sorted(shown, key=lambda r: r["score"]), sorted(want, key=lambda r: r["score"]), strict=True
    ):
        assert _same(got["wkt"], row["wkt"]) and got["score"] == pytest.approx(row["score"])
        assert got["keyword"] == row["keyword"] and got["prompt"] == "keywords"
    # the score filter re-filters without a model run
    kept = [r for r in want if r["score"] >= 0.33]
    assert 0 < len(kept) < len(want), "the filter must keep some and drop some here"
    assert out["filtered"] == {"count": len(kept), "label": f"{len(kept)} polygon(s)", "runs": 0}
    # Export: QGIS's writer, the filtered polygons; a second export to the same file refused
    assert out["exported"] == str(export) and out["again"] is None
    written = gpd.read_file(export)
    assert len(written) == len(kept) and written.crs.to_epsg() == 32633
    assert sorted(written["score"]) == pytest.approx(sorted(r["score"] for r in kept))
    # zoomed out, the view's metres per screen pixel (on the ellipsoid) is the GSD asked for
    from pyproj import Geod

    west, south, east, north = out["outer"]
    to_lonlat = Transformer.from_crs(3857, 4326, always_xy=True).transform
    lon0, lat = to_lonlat(west, (south + north) / 2)
    lon1, _ = to_lonlat(east, (south + north) / 2)
    metres = Geod(ellps="WGS84").inv(lon0, lat, lon1, lat)[2]
    assert out["gsd"] == pytest.approx(metres / out["width"], rel=1e-3) and out["gsd"] > 10
    # exemplars from EPSG:4326: the selected polygons' boxes in EPSG:32633, + and -
    ex = out["by_exemplars"]
    assert ex["label"] == "2 positive, 1 negative"
    for got, mark, label in zip(ex["exemplars"], marks, (1, 1, 0), strict=True):
        back = shapely_transform(to_4326, shapely.segmentize(mark, 10))
        there = shapely_transform(Transformer.from_crs(4326, 32633, always_xy=True).transform,
                                  shapely.segmentize(back, 1e-4))  # fmt: skip
        assert np.allclose(got[:4], there.bounds, atol=1.0) and got[4] == label
    action, sent = ex["sent"]
    assert (
        sent["extent"] is None and sent["keywords"] is None and sent["exemplars"] == ex["exemplars"]
    )
    want = canvas.segment(key, exemplars=sent["exemplars"], score_thr=sent["score_thr"])["features"]
    assert len(ex["shown"]) == len(want) > 0
    for got, row in zip(
        sorted(ex["shown"], key=lambda r: r["score"]),
        sorted(want, key=lambda r: r["score"]),
        strict=True,
    ):
        assert _same(got["wkt"], row["wkt"]) and got["score"] == pytest.approx(row["score"])
    # a cancel mid-run: QGIS's progress was up, the layer unchanged, the analyst told
    cancelled = out["cancelled"]
    assert cancelled["progress_bar"] and cancelled["count"] == cancelled["count_before"]
    assert any("cancelled" in m["text"] for m in cancelled["messages"])

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
first = dict(shown=features(results), candidates=dock.prompts.candidates,
             points=dock.prompts.points, label=dock.candidate_label.text())
key(tool, "Tab")
second = features(results)
key(tool, "Tab"); key(tool, "Tab")  # round to the best again
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
report(first=first, second=second, refined=refined, undone=undone, refused=refused,
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


def _same(a: str, b, tolerance_m2: float = 1.0) -> bool:
    one, other = shapely_wkt.loads(a), b if not isinstance(b, str) else shapely_wkt.loads(b)
    return one.symmetric_difference(other).area <= tolerance_m2


def test_a_click_puts_the_librarys_polygon_on_the_canvas_and_accept_is_undoable(
    qgis_env, profile, scene, library, tiny_repository, tmp_path
):
    target = tmp_path / "roofs.gpkg"
    _analyst_layer(target)
    scenario = SETUP.format(repository=json.dumps(str(tiny_repository)), **scene) + CLICKS.format(
        target=json.dumps(str(target)), aim=AIM, refine=REFINE, outside=OUTSIDE
    )
    (out,) = run_dock(qgis_env, profile, scenario, tmp_path)
    canvas, key = library

    # the click, as the library answers the same point (the dock got it in EPSG:32633 from the
    # EPSG:3857 canvas, within a screen pixel of the aim)
    first = out["first"]
    (point,) = first["points"]
    assert np.hypot(point[0] - AIM[0], point[1] - AIM[1]) < 20 and point[2] == 1
    expected = canvas.click(key, [point])["candidates"]
    assert len(expected) == 3 and len(first["candidates"]) == 3
    for got, want in zip(first["candidates"], expected):
        assert _same(got["wkt"], want["wkt"]) and got["score"] == pytest.approx(want["score"])
    (shown,) = first["shown"]  # one object on the map: the best candidate, with provenance
    assert _same(shown["wkt"], expected[0]["wkt"])
    assert shown["score"] == pytest.approx(expected[0]["score"])
    assert (shown["prompt"], shown["source"]) == ("point", "s2.tif")
    assert shown["model"] and shown["created"]
    assert first["label"].startswith("candidate 1 of 3")
    # Tab: the second-ranked candidate replaces it
    (second,) = out["second"]
    assert _same(second["wkt"], expected[1]["wkt"])
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
    # Accept: the kept polygon added to the analyst's layer in EPSG:4326, theirs untouched
    accepted = {row["name"]: row for row in out["accepted"]}
    assert len(out["accepted"]) == 3 and {"mine-1", "mine-2"} <= set(accepted)
    (new,) = [row for row in out["accepted"] if row["name"] is None]
    to_4326 = Transformer.from_crs(32633, 4326, always_xy=True).transform
    library_4326 = shapely_transform(to_4326, shapely_wkt.loads(expected[0]["wkt"]))
    assert _same(new["wkt"], library_4326, tolerance_m2=1e-12)  # degrees²
    assert new["score"] == pytest.approx(expected[0]["score"])  # mapped by name
    # the layer's undo takes the accept back; the analyst's two features are as they were
    assert sorted(row["name"] for row in out["after_undo"]) == ["mine-1", "mine-2"]
    for row in out["after_undo"]:
        assert shapely.equals(shapely_wkt.loads(row["wkt"]), shapely_wkt.loads(accepted[row["name"]]["wkt"]))
    assert out["restarts"] == 0

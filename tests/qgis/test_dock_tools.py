"""The dock's map tools on a real QgsMapCanvas whose CRS (EPSG:3857) is not the raster's
(EPSG:32633): clicks and boxes reach the dock in the raster's CRS, Shift makes a negative, the
tools' keys, and the dock's width beside the map on a 1366 x 768 screen. No model: the tools'
signals are recorded."""

from __future__ import annotations

import json

import numpy as np
from pyproj import Transformer

from .dock_run import raster_bounds, run_dock

SCENARIO = """
import json
layer = load_raster({raster})
dock.raster.setLayer(layer)
view("EPSG:3857", {extent})
clicks, boxes, commands = [], [], []
dock.add_point = dock.set_box = dock.command = lambda *a: None  # the tools alone
dock.point_tool.clicked.connect(lambda x, y, p: clicks.append([x, y, p]))
dock.box_tool.boxed.connect(lambda *b: boxes.append(list(b)))
for tool in (dock.point_tool, dock.box_tool):
    tool.command.connect(commands.append)
events = [mouse(dock.point_tool, "release", x, y, "EPSG:32633", shift=bool(i % 2))
          for i, (x, y) in enumerate({points})]
(x0, y0), (x1, y1) = {box}
press = mouse(dock.box_tool, "press", x0, y0, "EPSG:32633")
mouse(dock.box_tool, "move", x1, y1, "EPSG:32633")
band = dock.box_tool._band.asGeometry().boundingBox().toString(3)
release = mouse(dock.box_tool, "release", x1, y1, "EPSG:32633")
taken = [key(dock.point_tool, k, ctrl) for k, ctrl in
         (("P", False), ("B", False), ("Tab", False), ("Escape", False), ("Backspace", False),
          ("Return", False), ("Return", True), ("A", False))]
body = dock.widget().widget()
report(clicks=clicks, events=events, boxes=boxes, box_events=[press, release], band=band,
       commands=commands, taken=taken, width=body.minimumSizeHint().width(),
       dock_width=dock.minimumSizeHint().width(),
       units_per_pixel=canvas.mapUnitsPerPixel())
"""


def test_clicks_and_boxes_on_a_web_mercator_canvas_reach_the_dock_in_the_rasters_crs(
    qgis_env, profile, s2_tif, s2_crop, tmp_path
):
    to_3857 = Transformer.from_crs(32633, 3857, always_xy=True)
    to_32633 = Transformer.from_crs(3857, 32633, always_xy=True)
    left, bottom, right, top = raster_bounds(s2_crop)
    xs, ys = to_3857.transform([left, right, left, right], [bottom, bottom, top, top])
    extent = [min(xs), min(ys), max(xs), max(ys)]
    rng = np.random.default_rng(7)
    points = np.column_stack(
        [rng.uniform(left, right, 6), rng.uniform(bottom, top, 6)]
    ).tolist() + [[left + 5, top - 5]]
    box = [[left + 300, top - 800], [left + 1500, top - 2000]]
    scenario = SCENARIO.format(raster=json.dumps(str(s2_tif)), extent=extent, points=points,
                               box=box)  # fmt: skip
    (out,) = run_dock(qgis_env, profile, scenario, tmp_path)

    # each click: the canvas's own map point (EPSG:3857, at the pixel the mouse hit) in the
    # raster's CRS, by PROJ here; within a screen pixel of where the mouse was aimed
    assert len(out["clicks"]) == len(points)
    pixel_m = out["units_per_pixel"]  # web mercator metres; ground metres are fewer
    for i, ((x, y, positive), event, aimed) in enumerate(
        zip(out["clicks"], out["events"], points, strict=True)
    ):
        expected = to_32633.transform(*event["map"])
        assert np.allclose([x, y], expected, atol=1e-3), (i, [x, y], expected)
        assert np.hypot(x - aimed[0], y - aimed[1]) < pixel_m
        assert positive == (i % 2 == 0)  # every other click had Shift down
    # the box: the canvas rectangle's bounding box in EPSG:32633
    (got,) = out["boxes"]
    (px0, py0), (px1, py1) = (e["map"] for e in out["box_events"])
    cx, cy = to_32633.transform([px0, px1, px0, px1], [py0, py0, py1, py1])
    assert got[0] <= min(cx) + 1e-3 and got[2] >= max(cx) - 1e-3
    assert got[1] <= min(cy) + 1e-3 and got[3] >= max(cy) - 1e-3
    assert got[2] - got[0] < (max(cx) - min(cx)) * 1.01
    assert got[3] - got[1] < (max(cy) - min(cy)) * 1.01
    assert out["band"] != "Empty"  # the rubber band followed the drag
    # the keys, taken by the active tool (so QGIS's own shortcuts never see them)
    assert out["commands"] == ["point", "box", "cycle", "reset", "undo", "keep", "accept"]
    assert out["taken"] == [True] * 7 + [False]
    # beside the map on a 1366 x 768 screen: the map keeps at least 900 px
    assert out["width"] < out["dock_width"] <= 1366 - 900  # its content never cut

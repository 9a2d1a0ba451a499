"""Shared helpers for the bench scripts: a tiny model repository and a timer."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "qgis_plugin"  # the QGIS plugin, as QGIS loads it
WORKER = PLUGIN / "napari_sam3_qgis" / "worker.py"


def tiny_repository(path: str | None) -> Path:
    """An exported tiny random-weight repository (python flavor, CPU): given, or exported once."""
    if path:
        return Path(path)
    out = Path("models/bench-tiny")
    if not (out / "sam3_manifest.json").exists():
        exporter = Path(sys.executable).parent / "sam3-export"
        subprocess.run(
            [str(exporter), "--random-weights", "--size", "tiny", "--flavor", "python",
             "--device", "cpu", "--out", str(out)],
            check=True,
        )  # fmt: skip
    return out


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    """Median wall time of `fn()` over `repeat` runs (after one warm-up), and its last result."""
    result = fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def sample_geotiff(folder: Path) -> tuple[Path, object]:
    """The shipped Sentinel-2 scene's true colour (B04, B03, B02) as `folder`/s2.tif on its own
    grid; the file and the raster read."""
    import rasterio

    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_sample_bands

    bands = sentinel2_sample_bands()
    raster = read_raster([bands[b] for b in ("B04", "B03", "B02")])
    path = Path(folder) / "s2.tif"
    _, rows, cols = raster.shape
    with rasterio.open(
        path, "w", driver="GTiff", count=3, height=rows, width=cols, dtype=raster.dtype,
        crs=raster.crs, transform=raster.transform,
    ) as ds:  # fmt: skip
        ds.write(raster.data)
    return path, raster


def click_points(raster, size: int, clicks: int):
    """`clicks` + 1 positive clicks spread over the middle half of the one `size` window at the
    raster's centre (features warm after the first), kept on the raster: (points in map
    coordinates, the same as (col, row) pixels, the window's (row, col) origin)."""
    import numpy as np

    from napari_sam3.scene.canvas import click_window

    _, rows, cols = raster.shape
    r0, c0 = click_window(cols // 2, rows // 2, cols, rows, size)
    span = min(size, rows, cols) // 4
    rng = np.random.default_rng(0)
    pixels = [
        (c0 + size // 2 + int(dc), r0 + size // 2 + int(dr))
        for dr, dc in rng.integers(-span, span, size=(clicks + 1, 2))
    ]
    pixels = [(min(max(c, 0), cols - 1) + 0.5, min(max(r, 0), rows - 1) + 0.5) for c, r in pixels]
    return [[*(raster.transform * p), 1] for p in pixels], pixels, (r0, c0)


def qgis_bench_parser(description: str, precision: str) -> argparse.ArgumentParser:
    """The QGIS benches' options: the model, its precision and threads, QGIS's Python, and the
    hidden ``--qgis-side PLAN`` with which a bench runs its own part in QGIS's Python."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repo", help="a model repository (default: the tiny bench model)")
    parser.add_argument("--precision", default=precision)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--qgis-python", default="/usr/bin/python3")
    parser.add_argument("--qgis-side", help=argparse.SUPPRESS)
    return parser


def run_qgis_side(script: str, qgis_python: str, folder: Path, plan: dict):
    """``script --qgis-side PLAN`` in QGIS's own Python (offscreen, without this Python's
    PYTHONPATH): the JSON of its last line of output. PLAN is ``plan`` written to
    ``folder``/plan.json with ``command`` and ``env``: how to start the plugin's worker in this
    Python (``worker.py --serve``)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    path = Path(folder) / "plan.json"
    command = [sys.executable, "-P", str(WORKER), "--serve"]
    path.write_text(json.dumps({"command": command, "env": env, **plan}))
    qgis_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    qgis_env["QT_QPA_PLATFORM"] = "offscreen"
    done = subprocess.run(
        [qgis_python, script, "--qgis-side", str(path)],
        env=qgis_env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1])

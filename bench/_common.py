"""Shared helpers for the bench scripts: a tiny model repository and a timer."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path


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

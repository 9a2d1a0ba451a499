"""Whole-scene segmentation of a 10980 x 10980 uint16 scene with the tiny model: time and memory.

Issue target: peak RSS under 2 GB. Prints the wall time split into read, stretch (the scene's
decimated statistics read, the per-tile stretch and letterbox), model and merge (mapping to
scene pixels, seam merge, deduplication), tiles per second, peak RSS, and the time to write the
GeoPackage and the label GeoTIFF.

The scene is synthesised (3 bands, tiled 512 x 512, deflate) in a temporary folder by a child
process, and the tiny random-weight model is exported by `sam3-export` in another, so neither
counts towards this process's peak RSS. Tile reads run one tile ahead of the model in a thread.

    python bench/bench_scene.py                          # tile 1008 (downsampled to S by the client)
    python bench/bench_scene.py --models DIR --tile-size 448 --score-thr 0
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SIDE = 10980

SYNTHESISE = textwrap.dedent(
    """
    import sys
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin
    from rasterio.windows import Window

    path, side = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    profile = dict(
        driver="GTiff", count=3, height=side, width=side, dtype="uint16", nodata=0,
        crs="EPSG:32633", transform=from_origin(300000, 5900040, 10, 10),
        tiled=True, blockxsize=512, blockysize=512, compress="deflate", predictor=2, zlevel=1,
    )
    fields = rng.integers(300, 3000, size=(3, 64, 64)).astype(np.float32)
    with rasterio.open(path, "w", **profile) as ds:
        for r in range(0, side, 1024):
            h = min(1024, side - r)
            rows = np.arange(r, r + h)[:, None]
            cols = np.arange(side)[None, :]
            # Patchwork 'fields' of ~170 px, with per-pixel noise; a nodata wedge as at a swath edge.
            cell = fields[:, (rows // 172) % 64, (cols // 172) % 64]
            noise = rng.normal(0, 40, size=(3, h, side)).astype(np.float32)
            block = np.clip(cell + noise, 1, 65535).astype(np.uint16)
            block[:, cols < (side - rows) // 4] = 0
            ds.write(block, window=Window(0, r, side, h))
    """
)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _export(out: Path) -> Path:
    exporter = shutil.which("sam3-export") or str(Path(sys.executable).parent / "sam3-export")
    args = [exporter, "--random-weights", "--size", "tiny", "--flavor", "python"]
    subprocess.run([*args, "--device", "cpu", "--out", str(out), "--quiet"], check=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, help="an exported tiny repository (else exported)")
    parser.add_argument("--tile-size", type=int, default=1008)
    parser.add_argument("--overlap", type=int, help="default: tile size / 8")
    parser.add_argument("--score-thr", type=float, help="default: the model's")
    parser.add_argument("--keywords", default="building,field,water,road")
    parser.add_argument("--side", type=int, default=SIDE, help="scene side in pixels")
    parser.add_argument("--keep", type=Path, help="folder for the scene and outputs (kept)")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_scene_"))
    work.mkdir(parents=True, exist_ok=True)
    scene = work / f"scene_{args.side}.tif"
    try:
        if not scene.exists():
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", SYNTHESISE, str(scene), str(args.side)], check=True
            )
            print(
                f"synthesised {scene.name}: {scene.stat().st_size / 2**20:.0f} MiB on disk "
                f"({time.perf_counter() - t0:.0f} s)"
            )
        models = args.models or _export(work / "tiny")

        rss0 = _peak_rss_mib()
        from napari_sam3 import Sam3Client
        from napari_sam3.scene import segment_scene, write_scene

        client = Sam3Client.local(models)
        rss_client = _peak_rss_mib()
        cpu0 = _cpu_seconds()
        keywords = [k for k in args.keywords.split(",") if k]
        df = segment_scene(
            client,
            scene,
            keywords=keywords,
            tile_size=args.tile_size,
            overlap=args.overlap,
            score_thr=args.score_thr,
            progress=False,
        )
        rss_segment = _peak_rss_mib()
        cpu = _cpu_seconds() - cpu0
        timings = df.attrs["timings"]
        tiles = len(df.attrs["tiles"])
        run = tiles - df.attrs["skipped_tiles"]

        t0 = time.perf_counter()
        write_scene(df, work / "detections.gpkg", overwrite=True)
        t_gpkg = time.perf_counter() - t0
        rss_gpkg = _peak_rss_mib()
        t0 = time.perf_counter()
        write_scene(df, work / "labels.tif", overwrite=True)
        t_tif = time.perf_counter() - t0
        rss_tif = _peak_rss_mib()

        print(f"\n{client!r}")
        print(
            f"scene {args.side} x {args.side} uint16 x 3 bands, tile {args.tile_size} px "
            f"-> model {client.image_size} px, keywords {keywords}, {os.cpu_count()} CPUs"
        )
        print(
            f"tiles: {tiles} ({df.attrs['skipped_tiles']} all nodata, skipped), "
            f"detections: {len(df)} ({int((df['merged'] > 1).sum())} merged across seams)"
        )
        wall = timings["wall"]
        for phase in ("read", "stretch", "model", "merge"):
            print(
                f"  {phase:<8} {timings[phase]:8.1f} s  ({100 * timings[phase] / wall:4.0f}% of wall)"
            )
        print(
            f"  (stretch includes the scene's statistics, one decimated read: {timings['scene_stats']:.1f} s)"
        )
        print(f"  {'wall':<8} {wall:8.1f} s   (reads overlap the model: one tile read ahead)")
        print(f"  {'cpu':<8} {cpu:8.1f} s   (this process, all threads; the machine may be shared)")
        print(f"tiles per second: {tiles / wall:.2f} ({run / wall:.2f} run through the model)")
        print(f"write GeoPackage {t_gpkg:.1f} s, label GeoTIFF {t_tif:.1f} s")
        print(
            f"peak RSS: before {rss0:.0f} MiB, client loaded {rss_client:.0f} MiB, "
            f"after segmentation {rss_segment:.0f} MiB, after GeoPackage {rss_gpkg:.0f} MiB, "
            f"after label GeoTIFF {rss_tif:.0f} MiB"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

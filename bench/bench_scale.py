"""Throughput of segment_scene against 1, 2 and 3 local CPU tritonservers (tiny model) at
1, 4 and 8 requests in flight, and of `segment_scenes` over a folder with 1 and 2 dask workers.

    .venv/bin/python bench/bench_scale.py [--repository DIR] [--tile-size 112]

Prints tiles/s side by side and where the time goes (read, stretch, model, wait, merge, write).
Without --repository the tiny random-weight model is exported to a temporary folder first.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from napari_sam3 import Sam3Client
from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.plugin.sample_data import sentinel2_sample_bands
from napari_sam3.scene import segment_scene
from napari_sam3.scene.batch import segment_scenes
from napari_sam3.serving.server import TritonServer


def tiny_repository(tmp: Path) -> Path:
    from sam3_export.pipeline import export_all
    from sam3_export.triton_repo import write_repository

    manifest = export_all(tmp, size="tiny", seed=0)
    write_repository(tmp, manifest, flavor="python", device="cpu")
    return tmp


def stack_geotiff(paths, target: Path) -> Path:
    import rasterio

    from napari_sam3.imagery.raster import read_raster

    full = read_raster(paths)
    _, rows, cols = full.data.shape
    profile = dict(driver="GTiff", count=3, height=rows, width=cols, dtype=full.data.dtype,
                   tiled=True, blockxsize=256, blockysize=256, compress="deflate")  # fmt: skip
    with rasterio.open(target, "w", crs=full.crs, transform=full.transform, **profile) as ds:
        ds.write(full.data)
    return target


def scene_figures(repository: Path, paths, tile_size: int, logs: Path) -> None:
    servers: list[TritonServer] = []
    opts = dict(prompt="building", tile_size=tile_size, score_thr=0.0, progress=False)
    rows = []
    try:
        for count in (1, 2, 3):
            while len(servers) < count:
                log = logs / f"triton{len(servers)}.log"
                servers.append(TritonServer(repository, log_file=log).start())
            for n in (1, 4, 8):
                # a fresh client each run: the client's answer cache would skip repeats
                with Sam3Client([s.grpc_address for s in servers]) as client:
                    df = segment_scene(client, paths, in_flight=n, **opts)
                t = df.attrs["timings"]
                tiles = len(df.attrs["tiles"])
                rows.append((count, n, tiles / t["wall"], t))
                print(
                    f"servers {count}  in flight {n}:  {tiles / t['wall']:6.1f} tiles/s  "
                    f"wall {t['wall']:5.1f} s  read {t['read']:5.1f}  stretch {t['stretch']:5.1f}  "
                    f"model {t['model']:5.1f}  wait {t['wait']:5.1f}  merge {t['merge']:4.1f}",
                    flush=True,
                )
    finally:
        for server in servers:
            server.stop()
    base = {n: r for c, n, r, _ in rows if c == 1}
    print("\ntiles/s relative to 1 server at the same in-flight count:")
    for n in (1, 4, 8):
        line = "  ".join(f"{c} servers {r / base[n]:4.2f}x" for c, m, r, _ in rows if m == n)
        print(f"  in flight {n}: {line}")


def folder_figures(repository: Path, bands, tile_size: int, tmp: Path) -> None:
    import numpy as np
    import rasterio

    from napari_sam3.imagery.raster import read_raster

    full = read_raster([bands["B04"], bands["B03"], bands["B02"]])
    folder = tmp / "scenes"
    folder.mkdir()
    for i, (r, c) in enumerate([(0, 0), (0, 768), (384, 0), (384, 768)]):
        data = np.ascontiguousarray(full.data[:, r : r + 384, c : c + 768])
        profile = dict(driver="GTiff", count=3, height=384, width=768, dtype="uint16")
        with rasterio.open(
            folder / f"cut{i}.tif", "w", crs=full.crs, transform=full.transform, **profile
        ) as ds:
            ds.write(data)
    paths = sorted(folder.glob("*.tif"))
    spec = ConnectionSpec(repository=str(repository), threads=1)
    print()
    for workers in (None, 1, 2):
        out = tmp / f"out-{workers}"
        t0 = time.perf_counter()
        result = segment_scenes(
            spec, paths, out, workers=workers, prompt="building", score_thr=0.0,
            tile_size=tile_size,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        tiles = sum(d["tiles"] for d in result.done.values())
        phases = {}
        for d in result.done.values():
            for k, v in d["timings"].items():
                phases[k] = phases.get(k, 0.0) + v
        name = "serial (no dask)" if workers is None else f"--workers {workers}"
        print(
            f"{name:<17} {len(paths)} scenes, {tiles} tiles: {tiles / wall:6.1f} tiles/s, "
            f"wall {wall:5.1f} s (incl. cluster start); summed over scenes: "
            + "  ".join(f"{k} {phases.get(k, 0):.1f}" for k in ("read", "stretch", "model", "merge", "write")),
            flush=True,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path)
    parser.add_argument("--tile-size", type=int, default=112)
    parser.add_argument(
        "--geotiff",
        action="store_true",
        help="read the scene from a tiled GeoTIFF stack (fast windows) instead of the JPEG 2000 "
        "band files (whose window decoding bounds the client here)",
    )
    parser.add_argument("--skip-folder", action="store_true", help="only the server figures")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d')}  {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores")  # fmt: skip
    bands = sentinel2_sample_bands()
    paths = [bands["B04"], bands["B03"], bands["B02"]]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        repository = args.repository or tiny_repository(tmp / "repo")
        if args.geotiff:
            paths = stack_geotiff(paths, tmp / "scene.tif")
        print(f"scene: {paths if isinstance(paths, Path) else '+'.join(p.name for p in paths)}")
        scene_figures(repository, paths, args.tile_size, tmp)
        if not args.skip_folder:
            folder_figures(repository, bands, args.tile_size, tmp)


if __name__ == "__main__":
    main()

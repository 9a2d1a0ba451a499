"""One scene across 2 dask workers against the serial run, and 16 remote scenes (COGs on a
loopback HTTP server) on 2 workers against serial, with the bytes each run read.

    .venv/bin/python bench/bench_cluster.py [--repository DIR] [--tile-size 112]

Both runs of each pair are made side by side in this process, and their outputs compared
(identical polygons and attributes, sorted by label_id). Without --repository the tiny
random-weight model is exported to a temporary folder first.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyogrio
import rasterio
from _common import tiny_repository

from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.imagery.raster import read_raster
from napari_sam3.plugin.sample_data import sentinel2_sample_bands
from napari_sam3.prompts.query import Query
from napari_sam3.scene.batch import segment_scenes
from napari_sam3.scene.cluster import SceneCluster, dask_client
from napari_sam3.scene.driver import segment_to_file
from napari_sam3.scene.settings import SceneSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "imagery"))
from http_server import RangeServer  # noqa: E402  (the tests' range-capable server)


def write(data: np.ndarray, like, target: Path, driver: str = "GTiff") -> Path:
    """3 bands in ``like``'s CRS and transform; ``driver="COG"``: a COG of 64 px blocks."""
    profile = dict(driver=driver, count=3, height=data.shape[1], width=data.shape[2])
    if driver == "COG":
        profile.update(blocksize=64, compress="deflate")
    with rasterio.open(
        target, "w", dtype=data.dtype, crs=like.crs, transform=like.transform, **profile
    ) as ds:
        ds.write(data)
    return target


def same(a: Path, b: Path) -> bool:
    x = pyogrio.read_dataframe(a, layer="detections").sort_values("label_id")
    y = pyogrio.read_dataframe(b, layer="detections").sort_values("label_id")
    return list(x.geometry.to_wkb()) == list(y.geometry.to_wkb()) and x.drop(
        columns="geometry"
    ).reset_index(drop=True).equals(y.drop(columns="geometry").reset_index(drop=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repository")
    parser.add_argument("--tile-size", type=int, default=112)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_cluster_"))
    repo = tiny_repository(args.repository)
    spec = ConnectionSpec(repository=str(repo), precision="fp32")
    client = spec.connect()
    query = Query.of(prompt="building", score_thr=0.0)
    settings = SceneSettings(tile_size=args.tile_size)
    full = read_raster([sentinel2_sample_bands()[b] for b in ("B04", "B03", "B02")])
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), tiny model")

    # 1. one scene, 448 x 672 px
    scene = write(full.data[:, :448, :672], full, tmp / "scene.tif")
    with dask_client(workers=2) as dask:
        cluster = SceneCluster(dask, spec)
        segment_to_file(client, scene, tmp / "warm.gpkg", query, settings, cluster=cluster)
        serial_s, cluster_s = [], []
        for i in range(3):  # side by side, alternating: the machine is shared
            t0 = time.perf_counter()
            serial = segment_to_file(client, scene, tmp / f"serial{i}.gpkg", query, settings)
            t1 = time.perf_counter()
            segment_to_file(
                client, scene, tmp / f"cluster{i}.gpkg", query, settings, cluster=cluster
            )
            serial_s.append(t1 - t0)
            cluster_s.append(time.perf_counter() - t1)
    tiles = len(serial.frame.attrs["tiles_run"])
    a, b = statistics.median(serial_s), statistics.median(cluster_s)
    ok = all(same(tmp / f"serial{i}.gpkg", tmp / f"cluster{i}.gpkg") for i in range(3))
    print(
        f"one scene ({tiles} tiles), median of 3: serial {a:.2f} s, 2 workers {b:.2f} s, "
        f"ratio {a / b:.2f}; identical: {ok}"
    )

    # 2. sixteen remote scenes, 224 x 336 px each
    www = tmp / "www"
    www.mkdir()
    with RangeServer(www) as server:
        urls = []
        for i in range(16):
            r, c = (i // 4) * 130, (i % 4) * 290
            cog = write(full.data[:, r : r + 224, c : c + 336], full, tmp / f"s{i:02d}.tif", "COG")
            urls.append(server.add(cog.name, cog))
        total = sum((www / f"s{i:02d}.tif").stat().st_size for i in range(16))
        opts = {"prompt": "building", "score_thr": 0.0, "tile_size": args.tile_size}
        t0 = time.perf_counter()
        segment_scenes(spec, urls, tmp / "serial16", **opts)
        t1 = time.perf_counter()
        serial_bytes = sum(server.served.values())
        server.reset_counts()
        segment_scenes(spec, urls, tmp / "workers16", workers=2, **opts)
        t2 = time.perf_counter()
        worker_bytes = sum(server.served.values())
        with dask_client(workers=2) as dask:  # started, and each worker's model loaded, first
            address = dask.scheduler.address
            segment_scenes(spec, urls[:2], tmp / "warm16", scheduler=address, **opts)
            server.reset_counts()
            t3 = time.perf_counter()
            segment_scenes(spec, urls, tmp / "running16", scheduler=address, **opts)
            t4 = time.perf_counter()
            running_bytes = sum(server.served.values())
    ok = all(
        same(tmp / "serial16" / f"s{i:02d}.gpkg", tmp / run / f"s{i:02d}.gpkg")
        for i in range(16)
        for run in ("workers16", "running16")
    )
    mib = 2**20
    print(
        f"16 remote scenes ({total / mib:.2f} MiB of COGs): serial {t1 - t0:.1f} s "
        f"({serial_bytes / mib:.2f} MiB read); --workers 2 {t2 - t1:.1f} s incl. cluster start "
        f"({worker_bytes / mib:.2f} MiB); a running 2-worker cluster {t4 - t3:.1f} s "
        f"({running_bytes / mib:.2f} MiB); ratios {(t1 - t0) / (t2 - t1):.2f} / "
        f"{(t1 - t0) / (t4 - t3):.2f}; identical: {ok}"
    )
    client.close()


if __name__ == "__main__":
    main()

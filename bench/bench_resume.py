"""What the tile journal costs a scene run, and what a resume saves (issue 42, item 2).

The same scene is written by ``segment_to_file`` with its journal (every finished tile recorded
atomically: a temporary file, flushed, renamed, the folder flushed) and without
(``journal=False``), alternately, ``--repeat`` times each; the medians and the journal's own
seconds per tile (``timings["journal"]``) are printed, with the record sizes. Then a run stopped
half-way is resumed, to show the tiles it does not segment again.

The scene is synthesised (3-band uint16, blocks of distinct brightness so the tiny random model
finds objects) in a temporary folder. The tiny model is the repository given by ``--models``
(or ``SAM3_TEST_TINY_REPOSITORY``). The tiny model's tiles take tens of milliseconds, the
full model's seconds: the journal's share of a real run is far smaller than here.

    python bench/bench_resume.py --models DIR [--side 896] [--tile-size 112] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import rasterio
from rasterio.transform import from_origin


def synthesise(path: Path, side: int) -> Path:
    rng = np.random.default_rng(0)
    data = (rng.random((3, side, side)) * 400).astype("uint16")
    for _ in range(side // 8):
        r, c = rng.integers(0, side - 40, 2)
        data[:, r : r + rng.integers(8, 40), c : c + rng.integers(8, 40)] += rng.integers(
            500, 3000
        ).astype("uint16")
    profile = dict(driver="GTiff", count=3, height=side, width=side, dtype="uint16")
    transform = from_origin(300000, 5800000, 10, 10)
    with rasterio.open(path, "w", crs="EPSG:32633", transform=transform, **profile) as ds:
        ds.write(data)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=os.environ.get("SAM3_TEST_TINY_REPOSITORY"))
    parser.add_argument("--side", type=int, default=896)
    parser.add_argument("--tile-size", type=int, default=112)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from napari_sam3.client.sam3 import Sam3Client
    from napari_sam3.prompts.query import Query
    from napari_sam3.scene import SceneSettings, segment_to_file
    from napari_sam3.scene.journal import journal_path

    client = Sam3Client.local(args.models, precision="fp32")
    query = Query(keywords=["building", "water"], score_thr=0.0, max_det=5)
    settings = SceneSettings(tile_size=args.tile_size)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        raster = synthesise(folder / "scene.tif", args.side)
        segment_to_file(client, raster, folder / "warm.gpkg", query, settings, journal=False)
        walls: dict[str, list[float]] = {"journal": [], "none": []}
        per_tile, sizes, tiles = [], [], 0
        for i in range(args.repeat):
            for kind in ("none", "journal"):
                out = folder / f"{kind}{i}.gpkg"
                sizes_seen: list[int] = []

                def peek(done: int, total: int, out=out, seen=sizes_seen) -> None:
                    book = journal_path(out)
                    if done == total and book.exists():
                        seen += [p.stat().st_size for p in book.glob("tile-*.bin")]

                t0 = time.perf_counter()
                done = segment_to_file(
                    client, raster, out, query, settings, journal=kind == "journal", progress=peek
                )
                walls[kind].append(time.perf_counter() - t0)
                tiles = len(done.frame.attrs["tiles_run"])
                if kind == "journal":
                    per_tile.append(done.frame.attrs["timings"]["journal"] / tiles)
                    sizes += sizes_seen
        none, kept = statistics.median(walls["none"]), statistics.median(walls["journal"])
        print(f"scene {args.side} x {args.side}, tile {args.tile_size}: {tiles} tiles, "
              f"{len(done.frame)} objects")  # fmt: skip
        print(
            f"without journal: median {none:.2f} s  ({', '.join(f'{w:.2f}' for w in walls['none'])})"
        )
        print(
            f"with journal:    median {kept:.2f} s  ({', '.join(f'{w:.2f}' for w in walls['journal'])})"
        )
        print(
            f"difference: {100 * (kept - none) / none:+.1f} % of the run; the writer thread "
            f"spent {1e3 * statistics.median(per_tile):.2f} ms per tile beside the run"
        )
        print(f"records: median {statistics.median(sizes) / 1024:.1f} KiB, "
              f"largest {max(sizes) / 1024:.1f} KiB")  # fmt: skip

        class Stop(BaseException):
            pass

        def stop(done: int, total: int) -> None:
            if done >= total // 2:
                raise Stop

        out = folder / "resumed.gpkg"
        try:
            segment_to_file(client, raster, out, query, settings, progress=stop)
        except Stop:
            pass
        t0 = time.perf_counter()
        again = segment_to_file(client, raster, out, query, settings, resume=True)
        print(f"resumed after half the tiles: {again.frame.attrs['resumed_tiles']} tiles from the "
              f"journal, {time.perf_counter() - t0:.2f} s (a whole run {kept:.2f} s)")  # fmt: skip


if __name__ == "__main__":
    main()

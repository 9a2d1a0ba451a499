"""bf16 against fp32 end to end at full size (issue 14): text, exemplar, concept, interactive.

Each side runs in its own process (one full-size model in memory at a time) on a 768 x 1008 crop of
the Sentinel-2 sample: fp32 is OpenVINO fp32; bf16 is OpenVINO bf16 where this CPU has it
natively, else the repository's graphs with every float tensor rounded to bf16
(`sam3_export.bf16_emulation`, run in ONNX Runtime; linked weights, nothing copied). Prints, per
prompt, the figures of `napari_sam3.client.parity` (box shift, score difference, mask IoU, top-k
agreement; interactive: predicted-IoU difference, mask IoU, ranking) and each side's time.

.venv/bin/python bench/bf16_parity.py --repo DIR [--threads 2] [--scope all|gemm] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BOXES = [[300, 260, 420, 380], [600, 500, 700, 640]]
CLICKS = [((500, 420), True), ((520, 300), False)]


def emulated_repository(repo: Path, out: Path, scope: str) -> Path:
    from napari_sam3.core import contract
    from sam3_export.bf16_emulation import emulated_copy

    graphs = {*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS}
    out.mkdir(parents=True, exist_ok=True)
    for entry in repo.iterdir():
        if (out / entry.name).exists():
            continue
        if entry.name in graphs:
            (out / entry.name).mkdir()
            os.symlink(entry / "config.pbtxt", out / entry.name / "config.pbtxt")
            emulated_copy(entry / "1" / "model.onnx", out / entry.name / "1", scope)
        else:
            os.symlink(entry, out / entry.name)
    return out


def side(args) -> None:
    import numpy as np

    from napari_sam3 import Sam3Client
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_true_colour

    image = read_raster(sentinel2_true_colour(), window=np.s_[0:768, 200:1208])
    client = Sam3Client.local(
        args.repo, threads=args.threads, runtime=args.runtime, precision=args.precision
    )
    results, times = {}, {}
    everything = {"score_thr": 0.0, "max_det": 1000, "dedup": None}

    def timed(name, fn):
        start = time.perf_counter()
        results[name] = fn()
        times[name] = time.perf_counter() - start

    timed("text", lambda: client.segment(image, "building", **everything))
    timed("exemplar", lambda: client.segment(image, exemplar_boxes=BOXES, **everything))
    concept = client.encode_exemplars(image, BOXES[:1])
    timed("concept", lambda: client.segment(image, concept=concept, **everything))
    session = client.interactive(image)
    for i, (xy, positive) in enumerate(CLICKS):
        timed(f"click{i}", lambda xy=xy, p=positive: session.add_point(xy, positive=p))
    summary = client.engine.runtime_summary()
    client.close()
    Path(args.out).write_bytes(pickle.dumps({"results": results, "times": times, "runs": summary}))


def run_side(repo: Path, runtime: str, precision: str, threads: int, out: Path) -> dict:
    if out.exists():  # a side measured by an earlier run with the same --work folder
        return pickle.loads(out.read_bytes())
    command = [sys.executable, __file__, "--repo", str(repo), "--side", str(out)]
    command += ["--runtime", runtime, "--precision", precision, "--threads", str(threads)]
    subprocess.run(command, check=True)
    return pickle.loads(out.read_bytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--scope", default="all", choices=("all", "gemm"))
    parser.add_argument("--work", type=Path, help="keep each side's results here (and reuse them)")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--runtime", default="openvino", help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        args.out = args.side
        side(args)
        return
    from napari_sam3.client.parity import compare_candidates, compare_detections
    from napari_sam3.runtime.onnx_runner import native_bf16

    native, why = native_bf16()
    with tempfile.TemporaryDirectory(prefix="bf16-parity-") as tmp:
        tmp = args.work or Path(tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        fp32 = run_side(args.repo, "openvino", "fp32", args.threads, tmp / "fp32.pkl")
        if native:
            bf16 = run_side(args.repo, "openvino", "bf16", args.threads, tmp / "bf16.pkl")
            label = "OpenVINO bf16 (native)"
        else:
            emu = emulated_repository(args.repo, tmp / "emulated", args.scope)
            bf16 = run_side(emu, "onnxruntime", "fp32", args.threads, tmp / "bf16.pkl")
            label = f"bf16 emulated (scope {args.scope}; {why})"
    print(f"fp32: {fp32['runs']}; bf16: {label}")
    for name in ("text", "exemplar", "concept"):
        stats = compare_detections(fp32["results"][name], bf16["results"][name])
        print(
            f"  {name:<9} {stats['detections']} detections: box shift <= {stats['box_shift']:.1f}"
            f" px, score diff <= {stats['score_diff']:.4f}, mask IoU >= "
            f"{stats['min_mask_iou']:.3f} ({stats['masks_compared']} masks), top-"
            f"{stats['top_k']} agree {stats['topk_agree']}"
        )
    for name in ("click0", "click1"):
        stats = compare_candidates(fp32["results"][name], bf16["results"][name])
        print(
            f"  {name:<9} predicted IoU diff <= {stats['iou_pred_diff']:.4f}, mask IoU >= "
            f"{stats['min_mask_iou']:.3f}, same ranking {stats['same_ranking']} (fp32 IoUs "
            f"{', '.join(f'{v:.3f}' for v in stats['ref_iou'])})"
        )
    for key in fp32["times"]:
        print(
            f"  time {key:<9} fp32 {fp32['times'][key]:7.1f} s   bf16 {bf16['times'][key]:7.1f} s"
        )


if __name__ == "__main__":
    main()

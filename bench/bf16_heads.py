"""bf16 against fp32, head by head, on the inputs a real prompt gives them (issue 23, item 4).

A first process runs the full-size model at fp32 (OpenVINO) on a 1008 x 1008 crop of the
Sentinel-2 sample and records the inputs each head graph is given: text, grounding decoder (text
and exemplar prompts), concept encoder, concept decoder, PVS decoder (a click). Then each head
alone is run on exactly those inputs at fp32, at bf16 natively (OpenVINO, where the CPU has it)
and at bf16 emulated (every float tensor rounded to bf16, `sam3_export.bf16_emulation`, run in
ONNX Runtime), and its outputs are compared with fp32's against the margins the postprocess
decides on:

- scores (sigmoid(logit) * sigmoid(presence)): the largest change, and how many keep/drop
  decisions flip at score_thr 0.3 / 0.5 / 0.7 and at the fp32 score of every candidate (the
  threshold an analyst might set between two candidates);
- masks (thresholded at mask_thr 0.5, full size): IoU of each candidate's bf16 mask with its
  fp32 mask, and how many dedup decisions (overlap coefficient >= 0.85 between two of the top 50
  candidates) flip;
- upstream heads (text, concept encoder) are judged through the fp32 decoder they feed.

.venv/bin/python bench/bf16_heads.py --repo DIR [--work DIR] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from napari_sam3.runtime.onnx_runner import PARITY_BOUNDS

# the measuring code and its bounds are the verification's (sam3_export/verify.py)
DEDUP = PARITY_BOUNDS["dedup"]
TOP = PARITY_BOUNDS["top"]
SIZE = [1008]  # the model's input size, set from the manifest


def record(repo: str, work: Path, threads: int) -> None:
    """Run the prompts at fp32 and keep each head graph's first inputs."""
    from napari_sam3 import Sam3Client
    from napari_sam3.core import contract

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_cache import scene_crop

    client = Sam3Client.local(repo, threads=threads, precision="fp32")
    heads = (
        contract.TEXT,
        contract.DECODER,
        contract.CONCEPT_ENCODER,
        contract.DECODER_CT,
        contract.PVS_DECODER,
    )
    seen: dict[str, list] = {name: [] for name in heads}
    infer = client.engine.infer

    def recording(model_name, inputs, output_names=None):
        if model_name in seen and len(seen[model_name]) < 2:
            seen[model_name].append({k: np.array(v) for k, v in inputs.items()})
        return infer(model_name, inputs, output_names)

    client.engine.infer = recording
    image = scene_crop(client.image_size)
    s = image.shape[-1]
    handle = client.image(image)
    handle.segment("building", score_thr=0.0)
    boxes = [[0.1 * s, 0.1 * s, 0.26 * s, 0.24 * s], [0.4 * s, 0.4 * s, 0.52 * s, 0.56 * s]]
    handle.segment(exemplar_boxes=boxes, exemplar_labels=[1, 0], score_thr=0.0)
    concept = handle.encode_exemplars(boxes[:1], [1])
    handle.segment(concept=concept, score_thr=0.0)
    handle.interactive().add_point((0.3 * s, 0.3 * s))
    client.close()
    with open(work / "inputs.pkl", "wb") as out:
        pickle.dump(seen, out)


def run_heads(repo: str, work: Path, variant: str, threads: int) -> None:
    """Every head on the recorded inputs at one variant: fp32, bf16 (native), emulated."""
    from napari_sam3.core import contract
    from napari_sam3.runtime import onnx_runner

    with open(work / "inputs.pkl", "rb") as f:
        seen = pickle.load(f)
    outputs: dict[str, list] = {}
    for name, feeds in seen.items():
        path = contract.graph_path(repo, name)
        if variant == "emulated":
            from sam3_export.bf16_emulation import emulated_copy

            path = emulated_copy(path, work / "emulated" / name, "all")
            runner = onnx_runner.make_runner(path, "onnxruntime", "fp32", threads, graph=name)
        else:
            runner = onnx_runner.make_runner(path, "openvino", variant, threads, graph=name)
        outputs[name] = [runner.run({k: f[k] for k in runner.input_names}) for f in feeds]
        if name in (contract.TEXT, contract.CONCEPT_ENCODER):  # judged through the fp32 decoder
            outputs[name + "+decoder"] = _downstream(
                repo, name, feeds, outputs[name], seen, threads
            )
        del runner
    with open(work / f"out_{variant}.pkl", "wb") as out:
        pickle.dump(outputs, out)


def _downstream(repo, name, feeds, produced, seen, threads):
    """The fp32 decoder on the first recorded decoder inputs, with this head's outputs."""
    from napari_sam3.core import contract
    from napari_sam3.runtime import onnx_runner

    decoder = contract.DECODER if name == contract.TEXT else contract.DECODER_CT
    runner = onnx_runner.make_runner(
        contract.graph_path(repo, decoder), "openvino", "fp32", threads, graph=decoder
    )
    feed = dict(seen[decoder][0])
    out = produced[0]
    if name == contract.TEXT:
        feed.update({k: out[k] for k in out if k in feed})
    else:
        for src, dst in zip(contract.CONCEPT_OUTPUTS, contract.CONCEPT_OUTPUTS, strict=True):
            if src in out and dst in feed:
                feed[dst] = out[src]
    return [runner.run({k: feed[k] for k in runner.input_names})]


def report(work: Path, variants: list[str]) -> dict:
    from napari_sam3.core import contract
    from sam3_export.verify import compare_grounding, compare_pvs, relative

    with open(work / "out_fp32.pkl", "rb") as f:
        ref = pickle.load(f)
    table: dict = {}
    for variant in variants:
        with open(work / f"out_{variant}.pkl", "rb") as f:
            got = pickle.load(f)
        for name in ref:
            for k, (r, g) in enumerate(zip(ref[name], got[name], strict=True)):
                key = f"{name}[{k}]"
                row = {"max |d| / max |fp32| per output": relative(r, g)}
                if contract.PRED_LOGITS in r:
                    row.update(compare_grounding(r, g, SIZE[0]))
                if contract.PVS_DECODER_IOU in r:
                    row.update(compare_pvs(r, g, SIZE[0]))
                table.setdefault(key, {})[variant] = row
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument(
        "--work",
        default=str(Path(tempfile.gettempdir()) / "sam3-bf16-heads"),
        help="a folder for the intermediate tensors (default: in the system's temporary folder)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from napari_sam3.core import contract

    SIZE[0] = contract.load_manifest(args.repo).sizes.image_size
    if args.step == "record":
        return record(args.repo, work, args.threads)
    if args.step == "heads":
        return run_heads(args.repo, work, args.variant, args.threads)
    from napari_sam3.runtime import host

    native, why = host.detect().native_bf16()
    variants = ["bf16", "emulated"] if native else ["emulated"]
    print(f"native bf16: {native} ({why})")
    me = [sys.executable, __file__, "--repo", args.repo, "--work", str(work)]
    me += ["--threads", str(args.threads)]
    if not (work / "inputs.pkl").exists():
        subprocess.run([*me, "--step", "record"], check=True)
    for variant in ["fp32", *variants]:  # each in its own process: one graph set in memory
        subprocess.run([*me, "--step", "heads", "--variant", variant], check=True)
    table = report(work, variants)
    (work / "report.json").write_text(json.dumps(table, indent=1))
    print_summary(table)
    print(f"(everything: {work / 'report.json'})")


def print_summary(table: dict) -> None:
    """One line per head input and variant: the figures the rule reads."""
    iou_key = f"mask IoU top {TOP}: min / median"
    dedup_key = f"dedup {DEDUP} pair decisions flipped (top {TOP})"
    for key, variants in table.items():
        for variant, row in variants.items():
            rel = row["max |d| / max |fp32| per output"]
            worst = max(rel, key=rel.get) if rel else ""
            parts = [f"{key:26s} {variant:8s} worst output {worst} {rel.get(worst, 0):.2e}"]
            if "max |d score|" in row:
                parts.append(
                    f"|d score| {row['max |d score|']:.4f} (fp32 scores {row['score range'][0]:.3f}"
                    f"..{row['score range'][1]:.3f}, median gap {row['median gap between fp32 scores']:.1e})"
                    f", flips @0.3/0.5/0.7 {row['flips@0.3']}/{row['flips@0.5']}/{row['flips@0.7']}"
                    f", neighbour cuts flipped {row['neighbour cuts flipped']}"
                    f", |d box| {row['max |d box| (px)']:.1f} px"
                    f", mask IoU min {row[iou_key][0]:.3f} median {row[iou_key][1]:.3f}"
                    f", dedup flips {row[dedup_key]}"
                )
            if "max |d predicted IoU|" in row:
                parts.append(
                    f"|d predicted IoU| {row['max |d predicted IoU|']:.4f} (gap of the best two "
                    f"{row['gap between the two best predicted IoUs']:.3f}), best kept "
                    f"{row['best candidate kept']}, mask IoU {row['mask IoU (3 candidates)']}"
                )
            print("; ".join(parts))


if __name__ == "__main__":
    main()

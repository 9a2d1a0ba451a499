"""Full-size export with random weights: export time, peak RSS, file sizes, parity on one
1008x1008 image, and ONNX Runtime vs eager torch time for encoder, text and decoder.

Needs about 11-14 GB of RAM and 10+ minutes (the eager ViT alone takes ~1 min on 2 threads).
Run: python bench/bench_export_full.py [--out DIR] [--threads 2] [--repeat 2]
     python bench/bench_export_full.py --repo DIR     (skip the export: parity and timing only)

Times are reported as wall time and as CPU time of the process (all threads): on a machine
shared with other work the wall time mostly measures the neighbours, the CPU time much less.
torch and ONNX Runtime runs are interleaved so that both see the same load.
"""

from __future__ import annotations

import argparse
import logging
import resource
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np

warnings.filterwarnings("ignore")


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def rss_gib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**30


def test_image(size: int, seed: int = 0) -> np.ndarray:
    """A blocky random RGB image with noise, uint8 [1,3,S,S]."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (1, 3, size // 56 + 1, size // 56 + 1))
    image = np.repeat(np.repeat(coarse, 56, axis=2), 56, axis=3)[..., :size, :size]
    return np.clip(image + rng.integers(-25, 26, image.shape), 0, 255).astype(np.uint8)


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


class Timer:
    """Best wall and CPU time per (step, engine) over interleaved runs."""

    def __init__(self) -> None:
        self.wall: dict[tuple[str, str], float] = {}
        self.cpu: dict[tuple[str, str], float] = {}

    def __call__(self, key: tuple[str, str], fn, *args):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn(*args)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        self.wall[key] = min(wall, self.wall.get(key, float("inf")))
        self.cpu[key] = min(cpu, self.cpu.get(key, float("inf")))
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="export here (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per step")
    parser.add_argument("--keep", action="store_true", help="keep the exported graphs")
    parser.add_argument("--repo", type=Path, help="an existing full export: skip the export")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for name in ("onnxscript", "onnx_ir", "torch.onnx"):
        logging.getLogger(name).setLevel(logging.ERROR)

    import torch

    from napari_sam3.core import contract
    from napari_sam3.runtime.host import import_onnxruntime
    from sam3_export.graphs.pvs_decoder import image_features
    from sam3_export.model import build_sam3, model_id

    ort = import_onnxruntime()
    from sam3_export.patches import no_pin_memory
    from sam3_export.pipeline import export_all

    torch.set_num_threads(args.threads)
    out = args.repo or args.out or Path(tempfile.mkdtemp(prefix="sam3-full-"))
    print(f"threads: {args.threads}; repository: {out}")

    # -- export ---------------------------------------------------------------------------
    seed = args.seed
    if args.repo:
        manifest = contract.load_manifest(args.repo)
        if manifest.size != "full" or not manifest.random_weights:
            raise SystemExit("--repo must be a full-size random-weight export")
        seed = manifest.seed
    t0 = time.perf_counter()
    build = build_sam3("full", seed=seed)
    build_s = time.perf_counter() - t0
    params = sum(p.numel() for p in build.model.parameters())
    print(f"build: {build_s:.1f} s, {params / 1e6:.0f} M parameters, RSS {rss_gib():.1f} GiB")
    export_s = export_peak = None
    if args.repo:
        if model_id(build.model) != manifest.model_id:
            raise SystemExit("the rebuilt weights do not match the repository's model_id")
    else:
        t0 = time.perf_counter()
        manifest = export_all(out, build=build)
        export_s = time.perf_counter() - t0
        export_peak = peak_rss_gib()
        print(f"export: {export_s:.0f} s (graphs + manifest), peak RSS {export_peak:.1f} GiB")
    files = manifest.files
    for name, info in files.items():
        print(f"  {name:24s} {info['bytes'] / 1e9:6.3f} GB  {info['export_seconds']:6.1f} s")

    # -- one image, one text prompt ---------------------------------------------------------
    s = manifest.image_size
    image = test_image(s, seed)
    text = "a red car"
    model = build.model
    tokens = model.backbone.language_backbone.tokenizer([text], context_length=32).numpy()
    find = SimpleNamespace(
        img_ids=torch.zeros(1, dtype=torch.int64), text_ids=torch.zeros(1, dtype=torch.int64)
    )
    decoder = model.inst_interactive_predictor.model.sam_mask_decoder

    def eager_encoder():
        x = (torch.from_numpy(image).to(torch.float32) / 255.0 - 0.5) / 0.5
        out = model.backbone.forward_image(x)
        pvs = out["sam2_backbone_out"]["backbone_fpn"]
        levels = [decoder.conv_s0(pvs[0]), decoder.conv_s1(pvs[1]), pvs[2]]
        out["pvs"] = image_features(model.inst_interactive_predictor.model, levels)
        return out

    def eager_text():
        return model.backbone.forward_text([text], device="cpu")

    def eager_decoder(backbone_out):
        return model.forward_grounding(
            backbone_out=backbone_out,
            find_input=find,
            find_target=None,
            geometric_prompt=model._get_dummy_prompt(),
        )

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    sessions = {}
    t0 = time.perf_counter()
    for name in (contract.ENCODER, contract.TEXT, contract.DECODER):
        sessions[name] = ort.InferenceSession(
            str(contract.graph_path(out, name)), options, providers=["CPUExecutionProvider"]
        )
    load_s = time.perf_counter() - t0

    def run(name, feeds):
        sess = sessions[name]
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, feeds), strict=True))

    k = manifest.exemplar_slots
    no_slots = {
        contract.EXEMPLAR_BOXES: np.zeros((1, k, 4), np.float32),
        contract.EXEMPLAR_LABELS: np.zeros((1, k), np.int64),
        contract.EXEMPLAR_VALID: np.zeros((1, k), np.bool_),
    }

    timer = Timer()
    for _ in range(args.repeat):
        with torch.no_grad(), no_pin_memory():
            ref = timer(("encoder", "torch"), eager_encoder)
            ref.update(timer(("text", "torch"), eager_text))
            ref_out = timer(("decoder", "torch"), eager_decoder, ref)
        vision = timer(("encoder", "ort"), run, contract.ENCODER, {contract.IMAGES: image})
        text_out = timer(("text", "ort"), run, contract.TEXT, {contract.TOKEN_IDS: tokens})
        grounding = {n: vision[n] for n in contract.GROUNDING_VISION}
        feeds = {**grounding, **text_out, **no_slots}
        got = timer(("decoder", "ort"), run, contract.DECODER, feeds)
    final_peak = peak_rss_gib()

    # -- parity -----------------------------------------------------------------------------
    diffs = {
        "det_fpn (3 levels)": max(
            max_diff(vision[n], ref["backbone_fpn"][i]) for i, n in enumerate(contract.DET_FPN)
        ),
        "pvs (3 levels, first layer's 3 projections)": max(
            max_diff(vision[n], ref["pvs"][n]) for n in contract.PVS_FEATURES
        ),
        "text_features": max_diff(
            text_out[contract.TEXT_FEATURES], ref["language_features"].transpose(0, 1)
        ),
        contract.PRED_LOGITS: max_diff(got[contract.PRED_LOGITS], ref_out["pred_logits"][..., 0]),
        contract.PRED_BOXES: max_diff(got[contract.PRED_BOXES], ref_out["pred_boxes_xyxy"]),
        contract.PRESENCE_LOGIT: max_diff(
            got[contract.PRESENCE_LOGIT], ref_out["presence_logit_dec"]
        ),
        contract.PRED_MASKS: max_diff(got[contract.PRED_MASKS], ref_out["pred_masks"]),
    }
    limits = {
        contract.PRED_LOGITS: 1e-4,
        contract.PRED_BOXES: 1e-4,
        contract.PRESENCE_LOGIT: 1e-4,
        contract.PRED_MASKS: 1e-3,
    }
    top_ort = np.argsort(-got[contract.PRED_LOGITS][0], kind="stable")[:10].tolist()
    top_torch = np.argsort(-ref_out["pred_logits"][0, :, 0].numpy(), kind="stable")[:10].tolist()

    # -- report -----------------------------------------------------------------------------
    print("\n## Full-size export\n")
    print(f"- build (random weights): {build_s:.1f} s, {params / 1e6:.0f} M parameters")
    if export_s is not None:
        print(
            f"- export of every graph + manifest: {export_s:.0f} s; peak RSS {export_peak:.1f} GiB"
        )
    print(f"- peak RSS of this run: {final_peak:.1f} GiB")
    print(f"- ORT session creation (encoder, text, decoder): {load_s:.1f} s\n")
    print("| graph | file size | export time |\n| --- | --- | --- |")
    for name, info in files.items():
        print(f"| `{name}` | {info['bytes'] / 1e9:.3f} GB | {info['export_seconds']:.0f} s |")
    print(f"\nParity on one {s}x{s} image, text prompt '{text}' (max |ORT - eager torch|):\n")
    print("| tensor | max abs diff | limit |\n| --- | --- | --- |")
    for name, value in diffs.items():
        limit = limits.get(name)
        mark = "" if limit is None else (f"{limit:g} ok" if value <= limit else f"{limit:g} OVER")
        print(f"| {name} | {value:.2e} | {mark} |")
    print(f"\ntop-10 queries identical: {top_ort == top_torch}\n")
    print(f"{args.threads} threads, best of {args.repeat} interleaved runs:\n")
    print(
        "| step | torch wall | ORT wall | speed-up (wall) | torch CPU | ORT CPU | speed-up (CPU) |"
        "\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    steps = ("encoder", "text", "decoder")
    rows = [(step, (step,)) for step in steps] + [("**end to end (text prompt)**", steps)]
    for label, parts in rows:
        w = [sum(timer.wall[p, e] for p in parts) for e in ("torch", "ort")]
        c = [sum(timer.cpu[p, e] for p in parts) for e in ("torch", "ort")]
        print(
            f"| {label} | {w[0]:.2f} s | {w[1]:.2f} s | {w[0] / w[1]:.2f}x "
            f"| {c[0]:.2f} s | {c[1]:.2f} s | {c[0] / c[1]:.2f}x |"
        )
    if not args.keep and args.out is None and args.repo is None:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()

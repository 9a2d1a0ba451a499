"""`sam3-export`: SAM3 checkpoint (or random weights) -> ONNX graphs + manifest (+ Triton repo)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from napari_sam3.core.arguments import ArgumentParser

from .int8 import DEFAULT_SAMPLES, INT8_GRAPHS, PRESETS
from .model import SIZES, CheckpointError


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="sam3-export",
        description="Export SAM3 (image model) to static-shape fp32 ONNX graphs, "
        "DIR/<model>/1/model.onnx, with DIR/sam3_manifest.json and the Triton model repository.",
        epilog="Where the checkpoint comes from: Meta's SAM3 release file sam3.pt, on SAM3's "
        "model-hub page behind a licence acceptance. Download it yourself; this tool never "
        "downloads anything. Accepted layouts (.pt read with torch.load(weights_only=True), or "
        ".safetensors): the release layout (detector.*, tracker.*, optionally under "
        '{"model": ...}); the same with a DDP "module." prefix; a plain state dict of the image '
        'model as fine-tuning scripts save it (optionally under {"model": ...} or '
        '{"state_dict": ...}). A checkpoint without tracker.* weights exports the grounding '
        "graphs only (text and exemplar prompts; no clicks, no automatic masks).",
    )
    weights = p.add_mutually_exclusive_group()
    weights.add_argument(
        "--checkpoint",
        type=Path,
        help="sam3.pt or a fine-tuned checkpoint (.pt / .safetensors; layouts below)",
    )
    weights.add_argument(
        "--random-weights",
        action="store_true",
        help="seeded random weights (tests, benchmarks); the repository is marked as such",
    )
    weights.add_argument(
        "--refresh",
        action="store_true",
        help="rewrite the configs and model code around the graphs already in --out (after "
        "upgrading napari-sam3; seconds, the graphs are kept). Flavor, device, runtime and "
        "precision stay as written unless given",
    )
    weights.add_argument(
        "--quantize",
        action="store_true",
        help="quantize graphs of the repository already in --out to INT8 (OpenVINO IR beside "
        "each graph, listed in its manifest; needs NNCF: pip install 'napari-sam3-export[int8]')",
    )
    p.add_argument(
        "--int8",
        action="store_true",
        help="with --checkpoint or --random-weights: also quantize to INT8 (as --quantize)",
    )
    p.add_argument(
        "--int8-graphs",
        default=",".join(INT8_GRAPHS),
        help=f"the graphs --int8/--quantize quantize, comma-separated (default {INT8_GRAPHS[0]})",
    )
    p.add_argument(
        "--int8-preset",
        choices=PRESETS,
        default="performance",
        help="NNCF's preset: performance (symmetric activations, default) or mixed",
    )
    p.add_argument(
        "--int8-samples",
        type=int,
        default=DEFAULT_SAMPLES,
        help=f"calibration inputs at most (default {DEFAULT_SAMPLES}; full size: ~30 s each)",
    )
    p.add_argument(
        "--int8-share",
        type=float,
        default=1.0,
        metavar="F",
        help="quantize the first F of each graph's matrix products, the rest fp32 (default 1; "
        "less memory: the full-size encoder needs ~23 GiB whole, ~12 GiB at 0.5)",
    )
    p.add_argument(
        "--int8-no-bias-correction",
        action="store_true",
        help="skip NNCF's bias correction (its statistics took over 24 GB at full size)",
    )
    p.add_argument(
        "--verify",
        type=Path,
        metavar="REPO",
        help="verify an existing repository against the PyTorch model (rewrites its "
        "verification.json and VERIFICATION.md); a checkpoint's repository needs --checkpoint too",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the verification a --checkpoint export runs (its graphs against the PyTorch "
        "model; precision 'auto' then follows the static rule)",
    )
    p.add_argument(
        "--verify-images",
        type=Path,
        metavar="DIR",
        help="your own images (GeoTIFF, PNG, JPEG): verified on too, and used to calibrate and "
        "check INT8 graphs, besides the shipped Sentinel-2 scene",
    )
    p.add_argument(
        "--verify-thresholds",
        type=_thresholds,
        default=(),
        metavar="T,T",
        help="score thresholds whose keep/drop decisions must hold too (default 0.3, 0.5, 0.7)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="threads of the verification (default: the runtimes' own)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --random-weights (default 0)")
    p.add_argument("--size", choices=sorted(SIZES), default="full", help="default: full")
    p.add_argument("--out", type=Path, help="output model repository folder")
    p.add_argument(
        "--flavor",
        choices=("onnx", "python", "openvino"),
        default=None,
        help="how Triton serves the graphs: its ONNX Runtime backend, its Python backend (our "
        "runner, OpenVINO or ONNX Runtime), or its OpenVINO backend (CPU)",
    )
    p.add_argument(
        "--runtime",
        choices=("auto", "openvino", "onnxruntime"),
        default=None,
        help="python flavor: what runs the graphs in the server (auto: decided on its CPU)",
    )
    p.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16", "int8"),
        default=None,
        help="python and openvino flavors: fp32, bf16 (CPUs with native bf16 only), int8 "
        "(python flavor, the graphs with an INT8 IR; the others as auto), or auto",
    )
    p.add_argument(
        "--device",
        choices=("gpu", "cpu"),
        default=None,
        help="where Triton runs the graphs (passed to the repository writer)",
    )
    p.add_argument(
        "--max-queue",
        type=_queue_size,
        default=None,
        help="requests sam3_cached and sam3_multi hold waiting on a server; beyond it the "
        "server answers 'busy' and clients try again within their deadline (default 32; 0: "
        "no limit; --refresh keeps the repository's)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    return p


def _queue_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 1 << 20:
        raise argparse.ArgumentTypeError(f"a number of requests, 0 (no limit) or more: {text!r}")
    return value


def _thresholds(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        values = (-1.0,)
    if not values or not all(0 < v < 1 for v in values):
        raise argparse.ArgumentTypeError(
            f"score thresholds between 0 and 1, e.g. 0.4,0.6: {text!r}"
        )
    return values


def verify(repository: Path, args) -> int:
    """`--verify` (or after a checkpoint export): the report, one line per graph printed."""
    from napari_sam3.core.errors import Sam3Error

    from .verify import verify as run_verification

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"sam3-export: {line}")

    try:
        report = run_verification(
            repository,
            checkpoint=args.checkpoint,
            images_dir=args.verify_images,
            threads=args.threads,
            thresholds=args.verify_thresholds,
            progress=progress,
        )
    except Sam3Error as exc:
        print(f"sam3-export: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if not args.quiet:
        print(
            f"sam3-export: verification written to {repository}/VERIFICATION.md "
            f"({report['seconds']} s); precision 'auto' follows it"
        )
    return 0


DEFAULTS = {"flavor": "onnx", "device": "gpu", "runtime": "auto", "precision": "auto"}


def _written_options(out: Path, manifest) -> dict[str, str]:
    """The flavor, device, runtime and precision a repository was written with."""
    from napari_sam3.core import contract
    from napari_sam3.runtime.engines.model_config import load_model_configs

    configs = load_model_configs(out)
    if contract.SEGMENT in configs:  # the manifest as the writer recorded it, with the flavor
        manifest = contract.manifest_from_config(configs[contract.SEGMENT])
    options = {"flavor": manifest.flavor, "device": manifest.device}
    graph = configs.get(contract.ENCODER)
    for name in ("runtime", "precision"):
        options[name] = graph.parameters.get(name) if graph is not None else None
    written = {k: v or DEFAULTS[k] for k, v in options.items()}
    cached = configs.get(contract.CACHED)
    if cached is not None:
        from .triton_repo import written_max_queue

        written["max_queue"] = written_max_queue(cached.proto)  # None: the writer's default
    return written


def refresh(out: Path, args) -> int:
    """`--refresh`: the configs and model code rewritten around the graphs on disk."""
    from napari_sam3.core import contract

    try:
        manifest = contract.load_manifest(out)
    except (OSError, ValueError) as exc:
        print(f"sam3-export: error: cannot refresh {out}: {exc}", file=sys.stderr)
        return 2
    for name, value in _written_options(out, manifest).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    _write_repository(out, manifest, args)
    if not args.quiet:
        print(
            f"sam3-export: refreshed {out} (model_id {manifest.model_id[:16]}, flavor "
            f"{args.flavor}, device {args.device}): configs and model code of this version"
        )
    return 0


def quantize(out: Path, args):
    """`--quantize` / `--int8`: the INT8 IRs written into `out`; the manifest, or None (an
    error printed)."""
    from napari_sam3.core.errors import Sam3Error

    from .int8 import Options, quantize_repository

    graphs = [g.strip() for g in args.int8_graphs.split(",") if g.strip()]
    options = Options(
        preset=args.int8_preset,
        samples=args.int8_samples,
        bias_correction=not args.int8_no_bias_correction,
        share=args.int8_share,
    )
    try:
        manifest = quantize_repository(
            out, graphs, [args.verify_images] if args.verify_images else (), options
        )
    except Sam3Error as exc:
        print(f"sam3-export: error: {exc}", file=sys.stderr)
        return None
    if not args.quiet:
        for graph in graphs:
            record = manifest.data["int8"][graph]
            print(
                f"sam3-export: {graph}: INT8 IR written ({record['calibration']['inputs']} "
                f"calibration inputs, {record['seconds']} s; lowest cosine to fp32 on held-out "
                f"images {record['check']['min_cosine']:.4f})"
            )
    return manifest


def _write_repository(out: Path, manifest, args) -> None:
    if importlib.util.find_spec("sam3_export.triton_repo") is None:
        return
    from .triton_repo import write_repository

    write_repository(
        out,
        manifest,
        flavor=args.flavor,
        device=args.device,
        runtime=args.runtime,
        precision=args.precision,
        max_queue=args.max_queue,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.verify is not None:
        if args.random_weights or args.refresh:
            parser.error("--verify REPO takes --checkpoint (a checkpoint's repository) only")
        return verify(args.verify, args)
    if not (args.checkpoint or args.random_weights or args.refresh or args.quantize):
        parser.error(
            "one of --checkpoint, --random-weights, --refresh, --quantize or --verify is required"
        )
    if args.out is None:
        parser.error("--out DIR is required")
    if args.refresh:
        return refresh(args.out, args)
    if args.quantize:
        if quantize(args.out, args) is None:
            return 1
        return refresh(args.out, args)  # the ensembles carry the manifest
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.precision == "int8" and not args.int8:
        parser.error("--precision int8 runs INT8 graphs: add --int8 to make them")
    if importlib.util.find_spec("sam3_export.triton_repo") is not None:
        from .triton_repo import check_options

        try:  # before minutes of export, not after
            check_options(args.flavor, args.device, args.runtime, args.precision, args.max_queue)
        except ValueError as exc:
            parser.error(str(exc))
    logging.basicConfig(
        level=logging.ERROR if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.quiet:
        # The exporter's optimiser is chatty (per-node INFO and WARNING lines).
        for name in ("onnxscript", "onnx_ir", "torch.onnx"):
            logging.getLogger(name).setLevel(logging.ERROR)
    from .pipeline import export_all

    try:
        manifest = export_all(
            args.out,
            size=args.size,
            seed=args.seed if args.random_weights else None,
            checkpoint=args.checkpoint,
        )
    except CheckpointError as exc:
        print(f"sam3-export: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.int8:
        manifest = quantize(args.out, args)
        if manifest is None:
            return 1
    _write_repository(args.out, manifest, args)
    if not args.quiet:
        kind = "RANDOM weights" if manifest.random_weights else f"checkpoint {manifest.checkpoint}"
        print(
            f"sam3-export: {manifest.size} model ({kind}), model_id {manifest.model_id[:16]}, "
            f"written to {args.out}"
        )
    if args.checkpoint is not None and not args.no_verify:
        code = verify(args.out, args)
        if code:
            return code
    elif args.checkpoint is not None and not args.quiet:
        print("sam3-export: verification skipped (--no-verify): 'auto' follows the static rule")
    if not manifest.interactive_head:  # printed even with -q: the repository is limited
        print(
            "sam3-export: note: the checkpoint has no interactive (tracker.*) weights; "
            "exported the grounding graphs only (text and exemplar prompts). This repository "
            "has no interactive head: clicks and automatic masks are refused."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

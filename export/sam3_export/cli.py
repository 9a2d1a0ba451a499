"""`sam3-export`: SAM3 checkpoint (or random weights) -> ONNX graphs + manifest (+ Triton repo)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from .model import SIZES, CheckpointError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sam3-export",
        description="Export SAM3 (image model) to static-shape fp32 ONNX graphs, "
        "DIR/<model>/1/model.onnx, with DIR/sam3_manifest.json and the Triton model repository.",
    )
    weights = p.add_mutually_exclusive_group(required=True)
    weights.add_argument("--checkpoint", type=Path, help="official sam3.pt (detector.*/tracker.*)")
    weights.add_argument(
        "--random-weights",
        action="store_true",
        help="seeded random weights (tests, benchmarks); the repository is marked as such",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --random-weights (default 0)")
    p.add_argument("--size", choices=sorted(SIZES), default="full", help="default: full")
    p.add_argument("--out", type=Path, required=True, help="output model repository folder")
    p.add_argument(
        "--flavor",
        choices=("onnx", "python"),
        default="onnx",
        help="how Triton serves the graphs (passed to the repository writer)",
    )
    p.add_argument(
        "--device",
        choices=("gpu", "cpu"),
        default="gpu",
        help="where Triton runs the graphs (passed to the repository writer)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    return p


def _write_repository(out: Path, manifest, flavor: str, device: str) -> None:
    if importlib.util.find_spec("sam3_export.triton_repo") is None:
        return
    from .triton_repo import write_repository

    write_repository(out, manifest, flavor=flavor, device=device)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
        return 2
    _write_repository(args.out, manifest, args.flavor, args.device)
    if not args.quiet:
        kind = "RANDOM weights" if manifest.random_weights else f"checkpoint {manifest.checkpoint}"
        print(
            f"sam3-export: {manifest.size} model ({kind}), model_id {manifest.model_id[:16]}, "
            f"written to {args.out}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

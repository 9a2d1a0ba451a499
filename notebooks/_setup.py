"""Shared set-up of the napari-sam3 notebooks: find (or export) the model repository.

The notebooks look for the model repository in this order:

1. ``$NAPARI_SAM3_MODELS``: a repository written by ``sam3-export`` (e.g. from your SAM3
   checkpoint). If the folder does not exist yet, the tiny random-weight model is exported there.
2. ``models/random-tiny`` at the root of this repository, exported on first use with
   ``sam3-export --random-weights --size tiny --flavor python --device cpu``.

A ``--flavor python --device cpu`` repository runs on the embedded engine AND on the CPU Triton
server shipped in ``nvidia-pytriton`` (which has only Triton's Python backend), so every notebook
can use the same one.

RANDOM WEIGHTS GIVE MEANINGLESS MASKS. They only show that the pipeline runs. For real results
export your checkpoint once and point the notebooks at it::

    sam3-export --checkpoint path/to/sam3.pt --out models/sam3-full --flavor python --device cpu
    export NAPARI_SAM3_MODELS=$PWD/models/sam3-full
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_ENV = "NAPARI_SAM3_MODELS"
OUT_ENV = "NAPARI_SAM3_NOTEBOOK_OUT"
DEFAULT_MODELS = ROOT / "models" / "random-tiny"
MANIFEST = "sam3_manifest.json"

RANDOM_BANNER = """
################################################################################
#  RANDOM WEIGHTS: this model was never trained. Its masks are MEANINGLESS.
#  They only show that the pipeline runs. For real results export your SAM3
#  checkpoint and point the notebooks at it (then restart the kernel):
#      sam3-export --checkpoint sam3.pt --out models/sam3-full --flavor python --device cpu
#      export NAPARI_SAM3_MODELS=$PWD/models/sam3-full
################################################################################
"""


def _export_random_tiny(out: Path) -> Path:
    """The tiny random-weight model, exported once (a minute or two on a laptop)."""
    from napari_sam3.cli import ensure_repository

    print(f"exporting the tiny RANDOM-weight model into {out} (first use only) ...", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    return ensure_repository(out, None, "tiny", flavor="python", device="cpu")


def model_repository() -> Path:
    """The model repository the notebooks run: ``$NAPARI_SAM3_MODELS`` or ``models/random-tiny``."""
    given = os.environ.get(MODELS_ENV)
    path = Path(given).expanduser() if given else DEFAULT_MODELS
    if not (path / MANIFEST).exists():
        if path.exists() and any(path.iterdir()):
            raise FileNotFoundError(
                f"{path} is not empty but holds no {MANIFEST}: it is not a sam3-export repository. "
                f"Set {MODELS_ENV} to a repository written by sam3-export."
            )
        _export_random_tiny(path)
    return path


def is_random(client) -> bool:
    return client.manifest.random_weights


def warn_if_random(client) -> None:
    """Print a loud banner when the client runs a random-weight model."""
    if is_random(client):
        print(RANDOM_BANNER, file=sys.stderr, flush=True)
    else:
        print(f"model: {client!r}")


def thresholds(client) -> dict:
    """Options for `segment` / `multi` in the notebooks.

    A random-weight model scores everything below SAM3's default score threshold, so nothing would
    come back: the notebooks then keep every candidate (``score_thr=0``) and cap the count. With a
    real checkpoint this is empty and the library's defaults apply.
    """
    return {"score_thr": 0.0, "max_det": 10} if is_random(client) else {}


def everything_options(client) -> dict:
    """Options for `session.everything`: with random weights the quality filters are opened up."""
    if is_random(client):
        return {"pred_iou_thresh": 0.0, "stability_score_thresh": 0.0}
    return {}


def triton_repository(repository: Path) -> Path:
    """A repository the available Triton server can load.

    The CPU server shipped in ``nvidia-pytriton`` has only the Python backend, so it needs a
    ``--flavor python`` repository. A full Triton (e.g. the NGC container, ``tritonserver`` on
    PATH) also serves ``--flavor onnx``. A random-weight ``onnx`` repository (as written by
    ``napari-sam3 demo``) is re-exported as ``<name>-python`` beside it.
    """
    from napari_sam3 import Sam3Client

    client = Sam3Client.local(repository)
    if client.manifest.flavor == "python" or shutil.which("tritonserver"):
        return Path(repository)
    if is_random(client):
        return _export_random_tiny(Path(repository).with_name(Path(repository).name + "-python"))
    raise RuntimeError(
        f"{repository} was exported with --flavor {client.manifest.flavor}, which the CPU "
        "Triton server from nvidia-pytriton cannot load (it has only the Python backend). Export "
        "your checkpoint again with `--flavor python --device cpu` and point "
        f"{MODELS_ENV} at it, or run the NGC Triton container (tritonserver on PATH)."
    )


def output_dir(name: str) -> Path:
    """Where a notebook writes its files: ``$NAPARI_SAM3_NOTEBOOK_OUT/<name>``, else ``out/notebooks/<name>``."""
    base = os.environ.get(OUT_ENV)
    folder = (Path(base).expanduser() if base else ROOT / "out" / "notebooks") / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder

"""`export_all`: build the model once, export every graph, write the manifest."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import onnx
import torch

from napari_sam3.core import contract

from .dims import dims_dict
from .graphs import sizes_of
from .model import Sam3Build, build_sam3, model_id
from .onnx_io import OPSET, ExportedGraph, export_graph

log = logging.getLogger(__name__)

GRAPH_MODULES = ("encoder", "text", "concept", "decoder")
# Written by another part of the project; exported too when present.
OPTIONAL_GRAPH_MODULES = ("pvs_decoder",)


def graph_modules(interactive: bool = True) -> list[Any]:
    """The `graphs.*` modules whose `graph_exports(build)` make up the repository
    (`interactive=False`: the grounding graphs only)."""
    modules = [importlib.import_module(f"sam3_export.graphs.{n}") for n in GRAPH_MODULES]
    for name in OPTIONAL_GRAPH_MODULES if interactive else ():
        full = f"sam3_export.graphs.{name}"
        if importlib.util.find_spec(full) is not None:
            modules.append(importlib.import_module(full))
    return modules


def build_manifest(
    build: Sam3Build,
    graphs: list[ExportedGraph] | None = None,
    extra: dict[str, Any] | None = None,
) -> contract.Manifest:
    """Everything a client needs to know about the exported repository.

    `extra`: entries contributed by graph modules (`manifest_entries(build)`, e.g. the PVS
    decoder's slot counts).
    """
    sizes = sizes_of(build)
    d = build.dims
    manifest: dict[str, Any] = {
        "manifest_version": contract.MANIFEST_VERSION,
        "size": d.name,
        "image_size": sizes.image_size,
        "patch_size": sizes.patch_size,
        "feature_size": sizes.feature_size,
        "d_model": sizes.d_model,
        "text_tokens": sizes.text_tokens,
        "exemplar_slots": sizes.exemplar_slots,
        "concept_tokens": sizes.concept_tokens,
        "num_queries": sizes.num_queries,
        "mask_size": sizes.mask_size,
        "max_keywords": contract.MAX_KEYWORDS,
        "visual_prompt": contract.VISUAL_PROMPT,
        "box_format": {
            contract.EXEMPLAR_BOXES: "xyxy, model-input pixels (0..image_size)",
            contract.PRED_BOXES: "xyxy, normalised to [0, 1] of the model input",
        },
        "score": "sigmoid(pred_logits) * sigmoid(presence_logit)",
        "vision_tensors": [s.as_dict() for s in contract.vision_specs(sizes)],
        "interactive": {
            "image_size": sizes.image_size,
            "d_model": sizes.d_model,
            "mem_dim": d.tracker_mem_dim,
            "fpn_sizes": list(sizes.fpn_sizes),
            "mask_input_size": sizes.mask_size,
            "tensors": list(contract.PVS_FEATURES),
        },
        "graphs": {
            name: {
                "inputs": [s.as_dict() for s in contract.graph_io(name, sizes).inputs],
                "outputs": [s.as_dict() for s in contract.graph_io(name, sizes).outputs],
            }
            for name in contract.GROUNDING_GRAPHS
        },
        "random_weights": build.random_weights,
        "seed": build.seed,
        "checkpoint": build.checkpoint_name,
        "model_id": model_id(build.model, interactive=build.has_interactive),
        # False: the checkpoint had no interactive (tracker.*) weights; grounding graphs only.
        contract.INTERACTIVE_HEAD: build.has_interactive,
        "dims": dims_dict(d),
        "opset": OPSET,
        "versions": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "sam3": importlib.metadata.version("sam3"),
        },
    }
    manifest.update(extra or {})
    if graphs is not None:
        manifest["files"] = {
            g.name: {"bytes": g.bytes, "export_seconds": round(g.seconds, 2)} for g in graphs
        }
    return contract.Manifest.from_dict(manifest, "the exported manifest")


def write_manifest(out_dir: str | os.PathLike, manifest: contract.Manifest) -> Path:
    path = Path(out_dir) / contract.MANIFEST_FILE
    text = json.dumps(manifest.as_dict(), indent=2, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def export_all(
    out_dir: str | os.PathLike,
    size: str = "tiny",
    seed: int | None = 0,
    checkpoint: str | os.PathLike | None = None,
    build: Sam3Build | None = None,
) -> contract.Manifest:
    """Export every graph to `out_dir/<model>/1/model.onnx` and write `sam3_manifest.json`.

    Random weights from `seed` unless `checkpoint` is given (then loaded strictly). A prebuilt
    `build` may be passed instead (the bench uses it to time eager torch on the same weights).
    Returns the manifest.
    """
    start = time.perf_counter()
    if build is None:
        build = build_sam3(size=size, seed=seed, checkpoint=checkpoint)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("built %s model in %.1f s", build.dims.name, time.perf_counter() - start)
    exported: list[ExportedGraph] = []
    extra: dict[str, Any] = {}
    for module in graph_modules(build.has_interactive):
        for graph in module.graph_exports(build):
            exported.append(export_graph(graph, out_dir))
        if hasattr(module, "manifest_entries"):
            extra.update(module.manifest_entries(build))
    manifest = build_manifest(build, exported, extra)
    write_manifest(out_dir, manifest)
    log.info("exported %d graphs in %.1f s", len(exported), time.perf_counter() - start)
    return manifest

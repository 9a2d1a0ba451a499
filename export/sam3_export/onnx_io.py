"""torch -> ONNX for one graph: dynamo exporter, opset 18, static shapes, checked on disk."""

from __future__ import annotations

import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch

from napari_sam3.core import contract

from .graphs import GraphExport
from .patches import export_patches

log = logging.getLogger(__name__)

OPSET = 18
# Protobuf cannot hold a file over 2 GiB; stay clear of it.
EXTERNAL_DATA_BYTES = 1_800_000_000


@dataclass
class ExportedGraph:
    name: str
    path: Path
    seconds: float
    bytes: int  # the .onnx file plus its external data, if any


def _initializer_bytes(program: torch.onnx.ONNXProgram) -> int:
    total = 0
    for value in program.model.graph.initializers.values():
        if value.const_value is not None:
            total += value.const_value.nbytes
    return total


def _static_check(path: Path, graph: GraphExport) -> None:
    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v.name for v in model.graph.input if v.name not in initializers]
    outputs = [v.name for v in model.graph.output]
    if inputs != graph.input_names or outputs != graph.output_names:
        raise RuntimeError(
            f"{graph.name}: exported signature {inputs} -> {outputs} differs from the contract "
            f"{graph.input_names} -> {graph.output_names}"
        )
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise RuntimeError(f"{graph.name}: {value.name} has a dynamic dimension")


def export_graph(graph: GraphExport, out_dir: str | os.PathLike) -> ExportedGraph:
    """Export one wrapper to `out_dir/<name>/1/model.onnx` and check the file."""
    path = contract.graph_path(out_dir, graph.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (path, path.with_name(path.name + ".data")):
        stale.unlink(missing_ok=True)
    start = time.perf_counter()
    module = graph.module.eval()
    with torch.no_grad(), export_patches(module), warnings.catch_warnings():
        # torchvision's sampling_ratio=-1 (adaptive) is exported as ONNX's 0, also adaptive.
        warnings.filterwarnings("ignore", message="ONNX export for RoIAlign")
        program = torch.onnx.export(
            module,
            graph.args,
            dynamo=True,
            opset_version=OPSET,
            input_names=graph.input_names,
            output_names=graph.output_names,
            optimize=True,
            verbose=False,
        )
    external = _initializer_bytes(program) > EXTERNAL_DATA_BYTES
    program.save(str(path), external_data=external)
    del program
    # full_check runs shape inference too; with a path it also works past 2 GiB.
    onnx.checker.check_model(str(path), full_check=True)
    _static_check(path, graph)
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())
    log.info("%s: %.1f s, %.1f MB", graph.name, seconds, size / 1e6)
    return ExportedGraph(graph.name, path, seconds, size)

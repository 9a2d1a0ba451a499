"""Runtime fixtures: the tiny repository's graphs fed with real tensors, and its bf16 twin."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner
from napari_sam3.runtime.host import detect

# bf16 parity needs the hardware to compute bf16: where it lacks, bf16 is emulated (below)
NATIVE_BF16, NATIVE_BF16_WHY = detect().native_bf16()


@pytest.fixture(scope="session")
def graph_feeds(tiny_repository, s2_crop) -> dict[str, dict[str, np.ndarray]]:
    """Each graph's inputs, made by running the chain in ONNX Runtime on a Sentinel-2 crop."""
    from napari_sam3 import Sam3Client
    from napari_sam3.prompts.tokenizer import tokenize

    client = Sam3Client.local(tiny_repository)
    prepared = client.prepare(s2_crop)
    s = client.image_size
    tensors: dict[str, np.ndarray] = {
        contract.IMAGES: prepared.images_u8,
        contract.TOKEN_IDS: tokenize("field"),
        contract.EXEMPLAR_BOXES: np.array([[[0.2, 0.2, 0.5, 0.6]] * 8], np.float32) * s,
        contract.EXEMPLAR_LABELS: np.ones((1, 8), np.int64),
        contract.EXEMPLAR_VALID: np.arange(8)[None] < 2,
    }
    feeds = {}
    for graph in (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS):
        runner = onnx_runner.make_runner(
            contract.graph_path(tiny_repository, graph), "onnxruntime", "fp32"
        )
        for name in contract.PVS_PROMPTS:  # the grid graph's prompts have other shapes
            tensors.pop(name, None)
        for spec in runner.session.get_inputs():
            if spec.name not in tensors:
                shape = [int(d) for d in spec.shape]
                if spec.name == contract.PVS_POINT_COORDS:
                    tensors[spec.name] = np.full(shape, s / 3, np.float32)
                elif spec.name == contract.PVS_POINT_LABELS:
                    labels = np.full(shape, -1.0, np.float32)
                    labels[:, 0] = 1.0
                    tensors[spec.name] = labels
                elif spec.type == "tensor(bool)":
                    tensors[spec.name] = np.zeros(shape, np.bool_)
                else:
                    tensors[spec.name] = np.zeros(shape, np.float32)
        feeds[graph] = {i.name: tensors[i.name] for i in runner.session.get_inputs()}
        tensors.update(runner.run(feeds[graph]))
    client.close()
    return feeds


@pytest.fixture(scope="session")
def bf16_repository(tiny_repository, tmp_path_factory) -> tuple[Path, dict]:
    """(repository, Sam3Client.local keyword arguments) that compute the tiny model in bf16:
    OpenVINO's own bf16 where this CPU has it natively; elsewhere a copy of the repository whose
    graphs round every float tensor to bf16 (sam3_export.bf16_emulation), run in ONNX Runtime."""
    if NATIVE_BF16:
        return tiny_repository, {"runtime": "openvino", "precision": "bf16"}
    import onnx

    from sam3_export.bf16_emulation import emulate_bf16

    out = tmp_path_factory.mktemp("bf16_emulated") / "repository"
    shutil.copytree(tiny_repository, out)
    for graph in (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS):
        path = contract.graph_path(out, graph)
        onnx.save(emulate_bf16(onnx.load(str(path)), scope="all"), str(path))
    return out, {"runtime": "onnxruntime", "precision": "fp32"}

"""Runtime fixtures: the tiny repository's graphs fed with real tensors, and the model in bf16.

The suite computes the model in fp32 (the same verdicts on every host). bf16 is computed on any
CPU: as the emulated graphs (every float tensor rounded to bf16, run in ONNX Runtime) on every
host, and in addition as OpenVINO's own bf16 where this CPU computes bf16 natively: the only
case that is skipped, on a CPU that cannot, with the reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner
from napari_sam3.runtime.host import detect

NATIVE_BF16, NATIVE_BF16_WHY = detect().native_bf16()

# How a test computes the model: the suite's fp32 (OpenVINO, as `local_client`), the emulated
# bf16 graphs (any CPU) and OpenVINO's own bf16 (a CPU with native bf16 only).
FP32, BF16_EMULATED, BF16_NATIVE = "fp32", "bf16-emulated", "bf16-native"


def skip_unless_native_bf16() -> None:
    if not NATIVE_BF16:
        pytest.skip(f"OpenVINO's own bf16 needs a CPU that computes bf16: {NATIVE_BF16_WHY}")


@pytest.fixture(scope="session")
def graph_feeds(tiny_repository, s2_crop) -> dict[str, dict[str, np.ndarray]]:
    """Each graph's inputs, made by running the chain in ONNX Runtime on a Sentinel-2 crop."""
    from napari_sam3 import Sam3Client
    from napari_sam3.prompts.tokenizer import tokenize

    client = Sam3Client.local(tiny_repository, runtime="onnxruntime", precision="fp32")
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
def emulated_bf16_repository(tiny_repository, tmp_path_factory) -> Path:
    """A copy of the tiny repository whose graphs round every float tensor a node produces to
    bf16 (sam3_export.bf16_emulation, scope "all"); run it in ONNX Runtime at fp32."""
    import onnx

    from sam3_export.bf16_emulation import emulate_bf16

    out = tmp_path_factory.mktemp("bf16_emulated") / "repository"
    shutil.copytree(tiny_repository, out)
    for graph in (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS):
        path = contract.graph_path(out, graph)
        onnx.save(emulate_bf16(onnx.load(str(path)), scope="all"), str(path))
    return out


def model_in(request, side: str) -> tuple[Path, dict]:
    """(repository, Sam3Client.local keyword arguments) that compute the tiny model as `side`
    says (FP32, BF16_EMULATED or BF16_NATIVE); BF16_NATIVE skips where the CPU cannot."""
    tiny_repository = request.getfixturevalue("tiny_repository")
    if side == FP32:
        return tiny_repository, {"runtime": "openvino", "precision": "fp32"}
    if side == BF16_EMULATED:
        emulated = request.getfixturevalue("emulated_bf16_repository")
        return emulated, {"runtime": "onnxruntime", "precision": "fp32"}
    if side == BF16_NATIVE:
        skip_unless_native_bf16()
        return tiny_repository, {"runtime": "openvino", "precision": "bf16"}
    raise ValueError(f"unknown side {side!r}")

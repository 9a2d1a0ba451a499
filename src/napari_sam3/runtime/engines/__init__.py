"""Engines run the models of a repository written by `sam3-export`.

Both expose the same call, `infer(model_name, inputs, output_names) -> dict of numpy arrays`:
`LocalEngine` in-process with ONNX Runtime (the embedded default), `TritonEngine` over gRPC.
"""

from napari_sam3.runtime.engines.local import LocalEngine
from napari_sam3.runtime.engines.model_config import ModelConfig, load_model_configs
from napari_sam3.runtime.engines.protocol import Engine

__all__ = ["Engine", "LocalEngine", "ModelConfig", "load_model_configs"]

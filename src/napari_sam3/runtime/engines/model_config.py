"""Triton `config.pbtxt` files, parsed with Triton's own protobuf schema (without gRPC)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
from google.protobuf import text_format
from google.protobuf.message import Message

from napari_sam3.core.contract import TensorSpec
from napari_sam3.core.errors import BadData, InvalidInput, MissingDependency, UnknownKey

# A request's inputs and a model's answer, by tensor name; the output names a request asks for.
Tensors = Mapping[str, np.ndarray]
Outputs = dict[str, np.ndarray]
OutputNames = Sequence[str] | None

# Triton data types -> numpy dtype names, for the types this project uses.
TRITON_TO_DTYPE = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_FP32": "float32",
    "TYPE_STRING": "object",
}


def model_config_pb2() -> ModuleType:
    """Triton's generated `model_config_pb2`, imported without `tritonclient.grpc`.

    Importing `tritonclient.grpc.model_config_pb2` runs `tritonclient/grpc/__init__.py`, which
    imports grpc (21 `grpc.*` modules here, for an embedded user who never opens a channel); the
    generated file itself needs only protobuf. So the file is loaded on its own; protobuf's
    descriptor pool gives both imports the same message classes when gRPC is loaded later.
    """
    loaded = sys.modules.get("tritonclient.grpc.model_config_pb2")
    if loaded is not None:
        return loaded
    name = "napari_sam3._triton_model_config_pb2"
    if name not in sys.modules:
        package = importlib.util.find_spec("tritonclient")
        if package is None or not package.submodule_search_locations:
            raise MissingDependency("tritonclient is not installed: pip install tritonclient[grpc]")
        path = Path(package.submodule_search_locations[0]) / "grpc" / "model_config_pb2.py"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise MissingDependency(f"cannot load Triton's model config schema from {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


@dataclass(frozen=True)
class ModelConfig:
    name: str
    platform: str
    backend: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    parameters: dict[str, str]
    proto: Message

    @property
    def is_ensemble(self) -> bool:
        return self.platform == "ensemble"

    def input(self, name: str) -> TensorSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise UnknownKey(name)


def _specs(entries, pb2: ModuleType) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(
            e.name,
            TRITON_TO_DTYPE[pb2.DataType.Name(e.data_type)],
            tuple(e.dims),
            bool(getattr(e, "optional", False)),
        )
        for e in entries
    )


def parse_model_config(text: str) -> ModelConfig:
    pb2 = model_config_pb2()
    proto = text_format.Parse(text, pb2.ModelConfig())
    return ModelConfig(
        name=proto.name,
        platform=proto.platform,
        backend=proto.backend,
        inputs=_specs(proto.input, pb2),
        outputs=_specs(proto.output, pb2),
        parameters={k: v.string_value for k, v in proto.parameters.items()},
        proto=proto,
    )


def load_model_configs(repository: str | Path) -> dict[str, ModelConfig]:
    configs = {}
    for path in sorted(Path(repository).glob("*/config.pbtxt")):
        try:
            config = parse_model_config(path.read_text(encoding="utf-8"))
        except (text_format.ParseError, KeyError, UnicodeDecodeError) as exc:
            raise BadData(f"{path} is not a Triton model config this engine reads: {exc}") from None
        if config.name != path.parent.name:
            raise InvalidInput(f"{path}: model name {config.name!r} differs from its folder name")
        configs[config.name] = config
    return configs

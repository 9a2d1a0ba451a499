"""Triton `config.pbtxt` files, parsed with Triton's own protobuf schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

# Triton data types <-> numpy, for the types this project uses.
TRITON_TO_NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_STRING": np.object_,
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    dims: tuple[int, ...]
    optional: bool = False

    def describe(self) -> str:
        dims = ",".join("?" if d < 0 else str(d) for d in self.dims)
        return f"{self.name} {np.dtype(self.dtype).name}[{dims}]"

    def check(self, value: np.ndarray) -> None:
        """Raise ValueError, as Triton would, when `value` does not fit this input."""
        if np.dtype(self.dtype) == np.object_:
            ok_dtype = value.dtype == np.object_ or value.dtype.kind in "SU"
        else:
            ok_dtype = value.dtype == np.dtype(self.dtype)
        if not ok_dtype:
            raise ValueError(f"input {self.describe()} got dtype {value.dtype}")
        if len(value.shape) != len(self.dims) or any(
            d >= 0 and d != s for d, s in zip(self.dims, value.shape, strict=True)
        ):
            raise ValueError(f"input {self.describe()} got shape {list(value.shape)}")


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
        raise KeyError(name)


def _specs(entries) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(
            e.name,
            np.dtype(TRITON_TO_NUMPY[model_config_pb2.DataType.Name(e.data_type)]),
            tuple(e.dims),
            bool(getattr(e, "optional", False)),
        )
        for e in entries
    )


def parse_model_config(text: str) -> ModelConfig:
    proto = text_format.Parse(text, model_config_pb2.ModelConfig())
    return ModelConfig(
        name=proto.name,
        platform=proto.platform,
        backend=proto.backend,
        inputs=_specs(proto.input),
        outputs=_specs(proto.output),
        parameters={k: v.string_value for k, v in proto.parameters.items()},
        proto=proto,
    )


def load_model_configs(repository: str | Path) -> dict[str, ModelConfig]:
    configs = {}
    for path in sorted(Path(repository).glob("*/config.pbtxt")):
        config = parse_model_config(path.read_text())
        if config.name != path.parent.name:
            raise ValueError(f"{path}: model name {config.name!r} differs from its folder name")
        configs[config.name] = config
    return configs

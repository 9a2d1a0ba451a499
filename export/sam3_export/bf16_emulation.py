"""bf16 numerics on a CPU without bf16: the same graph with tensors rounded to bf16 and back.

For parity checks where the runtime's own bf16 cannot run (OpenVINO falls back to fp32 silently
on CPUs without AVX512_BF16/AMX). bf16 kernels take bf16 operands and accumulate in fp32; the
emulation rounds (round to nearest even, ONNX `Cast`) each operand and result of the GEMM-class
ops (`scope="gemm"`: MatMul, Gemm, Conv, ConvTranspose, Einsum, the ops whose bf16 kernels give
the speed-up), or every float tensor a node produces (`scope="all"`: like a runtime that stores
all activations in bf16). Real bf16 runtimes sit between the two: they keep some precision-
sensitive ops in fp32.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import TensorProto, helper

GEMM_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"})
SCOPES = ("gemm", "all")


def _float_names(model: onnx.ModelProto) -> set[str]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    names = {
        v.name
        for v in (*graph.value_info, *graph.input, *graph.output)
        if v.type.tensor_type.elem_type == TensorProto.FLOAT
    }
    names |= {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    return names


def emulate_bf16(model: onnx.ModelProto, scope: str = "gemm") -> onnx.ModelProto:
    """A copy of `model` with bf16 rounding inserted (see the module docstring)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    floats = _float_names(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    nodes = []
    rounded: dict[str, str] = {}

    def round_trip(name: str) -> list:
        tag = f"{name}__bf16"
        return [
            helper.make_node("Cast", [name], [tag], to=TensorProto.BFLOAT16),
            helper.make_node("Cast", [tag], [f"{tag}_f32"], to=TensorProto.FLOAT),
        ]

    for node in graph.node:
        is_gemm = node.op_type in GEMM_OPS
        if is_gemm:
            for i, name in enumerate(node.input):
                if name in floats:
                    if name not in rounded:
                        nodes.extend(round_trip(name))
                        rounded[name] = f"{name}__bf16_f32"
                    node.input[i] = rounded[name]
        if not (is_gemm or scope == "all"):
            nodes.append(node)
            continue
        renamed = []
        for i, name in enumerate(node.output):
            if name in floats and name:
                node.output[i] = f"{name}__f32"
                renamed.append(name)
        nodes.append(node)
        for name in renamed:
            nodes.append(
                helper.make_node("Cast", [f"{name}__f32"], [f"{name}__b"], to=TensorProto.BFLOAT16)
            )
            nodes.append(helper.make_node("Cast", [f"{name}__b"], [name], to=TensorProto.FLOAT))
    del graph.node[:]
    graph.node.extend(nodes)
    return out


def emulated_copy(model_path: str | Path, out_dir: str | Path, scope: str = "gemm") -> Path:
    """Write the bf16-emulated graph of `model_path` into `out_dir` (its external weights are
    hard-linked, not copied: same filesystem) and return the new file's path."""
    model_path, out_dir = Path(model_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(model_path), load_external_data=False)
    for init in model.graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            location = next(e.value for e in init.external_data if e.key == "location")
            target = out_dir / location
            if not target.exists():
                # a hard link: ONNX Runtime refuses external data that resolves outside the
                # model's folder (a symlink does)
                os.link((model_path.parent / location).resolve(), target)
    path = out_dir / "model.onnx"
    onnx.save(emulate_bf16(model, scope), str(path))
    return path

"""One small `torch.nn.Module` wrapper per exported graph.

Every graph module exposes `graph_exports(build) -> list[GraphExport]`: the wrapper, example
inputs (the shapes of `napari_sam3.core.contract`) and the graph's input/output names.
`sam3_export.onnx_io.export_all` exports whatever these return, including the interactive
decoder's module (`graphs/pvs_decoder.py`) when it is present.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from napari_sam3.core import contract


@dataclass
class GraphExport:
    """What `onnx_io.export_graph` needs for one graph."""

    name: str
    module: torch.nn.Module
    args: tuple[torch.Tensor, ...]
    input_names: list[str]
    output_names: list[str]


def example_inputs(io: contract.GraphIO, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Plausible values of the right dtype and shape for each input of `io` (for tracing).

    Shapes are static, so the values only have to be valid (boxes inside the image, a few valid
    exemplar slots of both labels, tokens that look like a tokenised phrase).
    """
    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in io.inputs:
        shape = spec.shape
        if spec.name == contract.IMAGES:
            value = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
        elif spec.name == contract.TOKEN_IDS:
            value = torch.zeros(shape, dtype=torch.int64)
            value[:, 0] = contract.SOT_TOKEN
            value[:, 1:4] = torch.randint(300, 40000, (shape[0], 3), generator=gen)
            value[:, 4] = contract.EOT_TOKEN
        elif spec.name == contract.TEXT_PADDING_MASK:
            value = torch.ones(shape, dtype=torch.bool)
            value[:, :5] = False
        elif spec.name == contract.EXEMPLAR_BOXES:
            xy = torch.rand(*shape[:-1], 2, generator=gen) * 0.5
            wh = torch.rand(*shape[:-1], 2, generator=gen) * 0.4 + 0.05
            value = torch.cat([xy, xy + wh], dim=-1) * _image_size(io)
        elif spec.name == contract.EXEMPLAR_LABELS:
            value = torch.tensor([[1, 0] * (shape[1] // 2) + [1] * (shape[1] % 2)])
        elif spec.name == contract.EXEMPLAR_VALID:
            value = torch.zeros(shape, dtype=torch.bool)
            value[:, : max(1, shape[1] // 2)] = True
        elif spec.name == contract.CONCEPT_PADDING_MASK:
            value = torch.ones(shape, dtype=torch.bool)
            value[:, :3] = False
        elif spec.dtype == "float32":
            value = torch.randn(shape, generator=gen)
        else:
            raise ValueError(f"no example for {spec.name} ({spec.dtype})")
        out.append(value)
    return tuple(out)


def _image_size(io: contract.GraphIO) -> int:
    for spec in io.inputs:
        if spec.name == contract.DET_FPN[2]:
            return spec.shape[-1] * contract.PATCH_SIZE
        if spec.name == contract.IMAGES:
            return spec.shape[-1]
    raise ValueError(f"{io.name}: cannot tell the image size")


def sizes_of(build) -> contract.Sizes:
    """The contract sizes of a `model.Sam3Build`."""
    return build.dims.sizes


def graph_export(name: str, module: torch.nn.Module, build) -> GraphExport:
    """A `GraphExport` whose names and example inputs come from the contract."""
    io = contract.graph_io(name, sizes_of(build))
    return GraphExport(name, module, example_inputs(io), io.input_names, io.output_names)

"""`sam3_text`: token_ids [1,32] -> text features and their padding mask."""

from __future__ import annotations

import torch
from sam3.model.sam3_image import Sam3Image

from napari_sam3.core import contract

from . import GraphExport, graph_export


class TextEncoder(torch.nn.Module):
    """The official `VETextEncoder` fed with token ids instead of strings.

    Outputs are batch-first: features [1,T,d_model], padding mask [1,T] (True = pad token 0),
    exactly what `VETextEncoder.forward` returns for the same tokens (seq-first there).
    """

    def __init__(self, model: Sam3Image) -> None:
        super().__init__()
        self.text = model.backbone.language_backbone

    def forward(self, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        padding = token_ids == contract.PAD_TOKEN
        _, memory = self.text.encoder(token_ids)
        return self.text.resizer(memory), padding


def graph_exports(build) -> list[GraphExport]:
    return [graph_export(contract.TEXT, TextEncoder(build.model), build)]

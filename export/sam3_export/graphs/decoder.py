"""`sam3_decoder`: vision tensors + text + exemplar slots -> the grounding head's outputs.

Literally `sam3_concept_encoder` followed by `sam3_decoder_ct`, so the split is exact.
Text-only = no valid slot; exemplar-only = the official "visual" text with valid slots.
"""

from __future__ import annotations

import torch
from sam3.model.sam3_image import Sam3Image

from napari_sam3.core import contract

from . import GraphExport, graph_export
from .concept import ConceptDecoder, ConceptEncoder


class GroundingDecoder(torch.nn.Module):
    def __init__(self, model: Sam3Image, image_size: int) -> None:
        super().__init__()
        self.concept = ConceptEncoder(model, image_size)
        self.decode = ConceptDecoder(model)

    def forward(
        self,
        det_fpn_0: torch.Tensor,
        det_fpn_1: torch.Tensor,
        det_fpn_2: torch.Tensor,
        det_pos_2: torch.Tensor,
        text_features: torch.Tensor,
        text_padding_mask: torch.Tensor,
        exemplar_boxes: torch.Tensor,
        exemplar_labels: torch.Tensor,
        exemplar_valid: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        tokens, padding = self.concept(
            det_fpn_2, det_pos_2, exemplar_boxes, exemplar_labels, exemplar_valid
        )
        return self.decode(
            det_fpn_0,
            det_fpn_1,
            det_fpn_2,
            det_pos_2,
            text_features,
            text_padding_mask,
            tokens,
            padding,
        )


def graph_exports(build) -> list[GraphExport]:
    module = GroundingDecoder(build.model, build.dims.sizes.image_size)
    return [graph_export(contract.DECODER, module, build)]

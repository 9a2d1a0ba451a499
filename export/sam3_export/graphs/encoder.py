"""`sam3_unified_encoder`: images_u8 -> the vision tensors of both heads (one ViT pass)."""

from __future__ import annotations

import torch
from sam3.model.sam3_image import Sam3Image

from napari_sam3.core import contract

from . import GraphExport, graph_export
from .pvs_decoder import PvsImageSide


class UnifiedEncoder(torch.nn.Module):
    """uint8 RGB [1,3,S,S] -> grounding neck levels + position encoding, then what the
    interactive head reads of the image (`pvs_decoder.PvsImageSide`).

    Normalisation is SAM3's: x / 255, then (x - 0.5) / 0.5. The interactive levels 0 and 1 are
    passed through the mask decoder's `conv_s0` / `conv_s1`, as `Sam3Processor.set_image` does.
    """

    def __init__(self, model: Sam3Image) -> None:
        super().__init__()
        self.backbone = model.backbone
        tracker = model.inst_interactive_predictor.model
        self.sam_mask_decoder = tracker.sam_mask_decoder
        self.pvs_image_side = PvsImageSide(tracker)

    def forward(self, images_u8: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = images_u8.to(torch.float32) / 255.0
        x = (x - 0.5) / 0.5
        out = self.backbone.forward_image(x)
        det_fpn = out["backbone_fpn"]
        det_pos = out["vision_pos_enc"][-1]
        pvs = out["sam2_backbone_out"]["backbone_fpn"]
        pvs_0 = self.sam_mask_decoder.conv_s0(pvs[0])
        pvs_1 = self.sam_mask_decoder.conv_s1(pvs[1])
        return (*det_fpn, det_pos, *self.pvs_image_side(pvs_0, pvs_1, pvs[2]))


def graph_exports(build) -> list[GraphExport]:
    return [graph_export(contract.ENCODER, UnifiedEncoder(build.model), build)]

"""`sam3_concept_encoder` and `sam3_decoder_ct`: the grounding head split at the geometry features.

The geometry encoder turns box exemplars (plus its CLS token, which cross-attends to the image)
into "concept tokens". They are the only image-dependent part of a visual prompt, so once encoded
they can be applied to any other image: `sam3_decoder_ct` is the rest of the grounding head
(fusion encoder, DETR decoder, scoring, segmentation) fed with text + concept tokens.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from sam3.model.geometry_encoders import Prompt
from sam3.model.sam3_image import Sam3Image

from napari_sam3.core import contract

from . import GraphExport, graph_export

# Placeholder for unused slots (any finite box works: the slot is masked out).
_EMPTY_BOX = (0.5, 0.5, 1.0, 1.0)


def slots_to_prompt(
    boxes: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, image_size: int
) -> Prompt:
    """K fixed exemplar slots -> the official `Prompt` (boxes normalised cxcywh, seq-first).

    boxes: [1,K,4] x1,y1,x2,y2 in model-input pixels; labels: [1,K] 1 positive / 0 negative;
    valid: [1,K] bool. Valid slots are moved first (stable), because SAM3 expects right-padded
    sequences; values in invalid slots are replaced, so garbage (even NaN) there is harmless.
    """
    k = boxes.shape[1]
    valid = valid.to(torch.bool)
    key = (~valid).to(torch.int64) * k + torch.arange(k, device=boxes.device)
    order = torch.argsort(key, dim=1)
    valid = torch.gather(valid, 1, order)
    labels = torch.gather(labels.to(torch.int64), 1, order).clamp(0, 1)
    boxes = torch.gather(boxes.to(torch.float32), 1, order[..., None].expand(-1, -1, 4))
    xyxy = boxes / float(image_size)
    cxcywh = torch.stack(
        (
            (xyxy[..., 0] + xyxy[..., 2]) / 2,
            (xyxy[..., 1] + xyxy[..., 3]) / 2,
            xyxy[..., 2] - xyxy[..., 0],
            xyxy[..., 3] - xyxy[..., 1],
        ),
        dim=-1,
    )
    empty = torch.tensor(_EMPTY_BOX, dtype=torch.float32, device=boxes.device)
    cxcywh = torch.where(valid[..., None], cxcywh, empty)
    labels = torch.where(valid, labels, torch.ones_like(labels))
    return Prompt(
        box_embeddings=cxcywh.transpose(0, 1),
        box_mask=~valid,
        box_labels=labels.transpose(0, 1),
    )


def _find_input(device: torch.device) -> SimpleNamespace:
    ids = torch.zeros(1, dtype=torch.int64, device=device)
    return SimpleNamespace(img_ids=ids, text_ids=ids)


class ConceptEncoder(torch.nn.Module):
    """det_fpn_2, det_pos_2, exemplar slots -> concept tokens [1,K+1,D] + padding mask [1,K+1]."""

    def __init__(self, model: Sam3Image, image_size: int) -> None:
        super().__init__()
        self.model = model
        self.image_size = image_size

    def forward(
        self,
        det_fpn_2: torch.Tensor,
        det_pos_2: torch.Tensor,
        exemplar_boxes: torch.Tensor,
        exemplar_labels: torch.Tensor,
        exemplar_valid: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        prompt = slots_to_prompt(exemplar_boxes, exemplar_labels, exemplar_valid, self.image_size)
        backbone_out = {"backbone_fpn": [det_fpn_2], "vision_pos_enc": [det_pos_2]}
        find = _find_input(det_fpn_2.device)
        _, img_feats, img_pos, sizes = self.model._get_img_feats(backbone_out, find.img_ids)
        tokens, padding = self.model.geometry_encoder(
            geo_prompt=prompt, img_feats=img_feats, img_sizes=sizes, img_pos_embeds=img_pos
        )
        return tokens.transpose(0, 1), padding


class ConceptDecoder(torch.nn.Module):
    """Vision tensors + text + concept tokens -> logits, boxes, mask logits, presence.

    The body of `Sam3Image.forward_grounding` after `_encode_prompt`: the prompt is the text
    tokens followed by the concept tokens (`_encode_prompt` appends an empty visual prompt too).
    pred_boxes are xyxy normalised to [0, 1] of the model input.
    """

    def __init__(self, model: Sam3Image) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        det_fpn_0: torch.Tensor,
        det_fpn_1: torch.Tensor,
        det_fpn_2: torch.Tensor,
        det_pos_2: torch.Tensor,
        text_features: torch.Tensor,
        text_padding_mask: torch.Tensor,
        concept_tokens: torch.Tensor,
        concept_padding_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        model = self.model
        backbone_out = {
            "backbone_fpn": [det_fpn_0, det_fpn_1, det_fpn_2],
            "vision_pos_enc": [det_pos_2],
        }
        find = _find_input(det_fpn_0.device)
        prompt = torch.cat([text_features.transpose(0, 1), concept_tokens.transpose(0, 1)], dim=0)
        prompt_mask = torch.cat(
            [text_padding_mask.to(torch.bool), concept_padding_mask.to(torch.bool)], dim=1
        )
        backbone_out, encoder_out, _ = model._run_encoder(backbone_out, find, prompt, prompt_mask)
        out = {"encoder_hidden_states": encoder_out["encoder_hidden_states"]}
        out, hs = model._run_decoder(
            memory=out["encoder_hidden_states"],
            pos_embed=encoder_out["pos_embed"],
            src_mask=encoder_out["padding_mask"],
            out=out,
            prompt=prompt,
            prompt_mask=prompt_mask,
            encoder_out=encoder_out,
        )
        model._run_segmentation_heads(
            out=out,
            backbone_out=backbone_out,
            img_ids=find.img_ids,
            vis_feat_sizes=encoder_out["vis_feat_sizes"],
            encoder_hidden_states=out["encoder_hidden_states"],
            prompt=prompt,
            prompt_mask=prompt_mask,
            hs=hs,
        )
        return (
            out["pred_logits"][..., 0],
            out["pred_boxes_xyxy"],
            out["pred_masks"],
            out["presence_logit_dec"],
        )


def graph_exports(build) -> list[GraphExport]:
    s = build.dims.sizes.image_size
    return [
        graph_export(contract.CONCEPT_ENCODER, ConceptEncoder(build.model, s), build),
        graph_export(contract.DECODER_CT, ConceptDecoder(build.model), build),
    ]

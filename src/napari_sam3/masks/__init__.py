"""Masks: the condensed RLE codec, the one mask interface, painting and deduplication."""

from napari_sam3.masks.dedup import box_nms, dedup_masks
from napari_sam3.masks.paint import paint_labels, score_order
from napari_sam3.masks.protocol import ArrayMask, LazyMask, Mask, as_mask, tight_crop
from napari_sam3.masks.rle import (
    RleMask,
    RleMasks,
    decode_mask,
    decode_masks,
    encode_mask,
    encode_masks,
)

__all__ = [
    "ArrayMask",
    "LazyMask",
    "Mask",
    "RleMask",
    "RleMasks",
    "as_mask",
    "box_nms",
    "decode_mask",
    "decode_masks",
    "dedup_masks",
    "encode_mask",
    "encode_masks",
    "paint_labels",
    "score_order",
    "tight_crop",
]

"""Mask transport and post-processing: the condensed RLE codec and deduplication."""

from napari_sam3.masks.dedup import box_nms, dedup_masks
from napari_sam3.masks.rle import (
    RleMask,
    RleMasks,
    decode_mask,
    decode_masks,
    encode_mask,
    encode_masks,
)

__all__ = [
    "RleMask",
    "RleMasks",
    "box_nms",
    "decode_mask",
    "decode_masks",
    "dedup_masks",
    "encode_mask",
    "encode_masks",
]

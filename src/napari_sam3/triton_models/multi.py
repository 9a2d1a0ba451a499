"""`sam3_multi`: several keywords on ONE vision pass.

The image goes through `sam3_unified_encoder` once; each keyword then runs the cheap heads
(`sam3_text`, `sam3_decoder`, `sam3_postprocess`) on the same vision tensors. Results are
concatenated keyword after keyword, with `keyword_counts` telling how many belong to each.
"""

from __future__ import annotations

import numpy as np

try:  # inside the napari_sam3 package
    from .. import contract
    from ..masks.rle import RleMasks, decode_masks
except ImportError:  # the copies beside the Triton model
    import contract
    from rle import RleMasks, decode_masks

OPTIONS = (contract.SCORE_THR, contract.MASK_THR, contract.MAX_DET)


class Logic:
    def __init__(self, model_dir: str, parameters: dict) -> None:
        self.image_size = int(parameters["image_size"])
        self.max_keywords = int(parameters["max_keywords"])
        self.slots = int(parameters["exemplar_slots"])

    def run(self, inputs: dict, call) -> dict:
        tokens = np.asarray(inputs[contract.TOKEN_IDS], np.int64)
        if tokens.ndim != 2 or len(tokens) == 0:
            raise ValueError(
                f"{contract.TOKEN_IDS} must be [N, {contract.TEXT_TOKENS}] with N >= 1"
            )
        if len(tokens) > self.max_keywords:
            raise ValueError(f"at most {self.max_keywords} keywords per request, got {len(tokens)}")
        vision = call(
            contract.ENCODER, {contract.IMAGES: inputs[contract.IMAGES]}, contract.GROUNDING_VISION
        )
        no_exemplars = {
            contract.EXEMPLAR_BOXES: np.zeros((1, self.slots, 4), np.float32),
            contract.EXEMPLAR_LABELS: np.zeros((1, self.slots), np.int64),
            contract.EXEMPLAR_VALID: np.zeros((1, self.slots), np.bool_),
        }
        options = {name: inputs[name] for name in OPTIONS if name in inputs}
        scores, boxes, masks, counts = [], [], [], []
        for row in tokens:
            text = call(
                contract.TEXT,
                {contract.TOKEN_IDS: row[None]},
                (contract.TEXT_FEATURES, contract.TEXT_PADDING_MASK),
            )
            heads = call(
                contract.DECODER, {**vision, **text, **no_exemplars}, contract.DECODER_OUTPUTS
            )
            result = call(contract.POSTPROCESS, {**heads, **options}, contract.RESULT_OUTPUTS)
            decoded = decode_masks(np.asarray(result[contract.MASKS_RLE], np.uint8).tobytes())
            scores.append(np.asarray(result[contract.SCORES], np.float32).reshape(-1))
            boxes.append(np.asarray(result[contract.BOXES], np.float32).reshape(-1, 4))
            masks.extend(decoded.as_list())
            counts.append(len(decoded))
        size = (self.image_size, self.image_size)
        return {
            contract.SCORES: np.concatenate(scores),
            contract.BOXES: np.concatenate(boxes),
            contract.MASKS_RLE: np.frombuffer(
                RleMasks.stack(masks, shape=size).to_bytes(), np.uint8
            ),
            contract.KEYWORD_COUNTS: np.asarray(counts, np.int32),
        }

"""`sam3_multi`: several keywords and concepts on ONE vision pass.

The image goes through `sam3_unified_encoder` once; each query then runs the cheap heads
(`sam3_text`, `sam3_decoder` or, for a concept, `sam3_decoder_ct`, then `sam3_postprocess`) on
the same vision tensors. Queries are the rows of `token_ids`; when C concepts are sent
(`concept_tokens` [C,T,D], `concept_padding_mask` [C,T]), the LAST C rows are the concepts' texts
and row N-C+c runs with concept c. Results are concatenated query after query, with
`keyword_counts` telling how many belong to each.
"""

from __future__ import annotations

import numpy as np

if __package__:  # inside napari_sam3 (a real ImportError surfaces as it is)
    from napari_sam3.core import contract, validate
    from napari_sam3.core.errors import InvalidInput
    from napari_sam3.masks.rle import RleMasks, RlePayload, as_rle_masks
    from napari_sam3.runtime.cached import concept_inputs
else:  # the copies beside the Triton model, where siblings are plain modules
    import contract
    import validate
    from cached import concept_inputs
    from errors import InvalidInput
    from rle import RleMasks, RlePayload, as_rle_masks

OPTIONS = (contract.SCORE_THR, contract.MASK_THR, contract.MAX_DET)


class Logic:
    def __init__(self, model_dir: str, parameters: dict) -> None:
        self.image_size = int(parameters["image_size"])
        self.max_keywords = int(parameters["max_keywords"])
        self.slots = int(parameters["exemplar_slots"])
        self.manifest = (
            contract.manifest_from_config(parameters)
            if contract.MANIFEST_PARAMETER in parameters
            else None
        )

    def run(self, inputs: dict, call, outputs=None) -> dict:
        validate.model_inputs(inputs, self.manifest)  # the client's rules, before any work
        tokens = np.asarray(inputs[contract.TOKEN_IDS], np.int64)
        if tokens.ndim != 2 or len(tokens) == 0:
            raise InvalidInput(
                f"{contract.TOKEN_IDS} must be [N, {contract.TEXT_TOKENS}] with N >= 1"
            )
        if len(tokens) > self.max_keywords:
            raise InvalidInput(
                f"at most {self.max_keywords} keywords per request, got {len(tokens)}"
            )
        vision = call(
            contract.ENCODER, {contract.IMAGES: inputs[contract.IMAGES]}, contract.GROUNDING_VISION
        )
        no_exemplars = {
            contract.EXEMPLAR_BOXES: np.zeros((1, self.slots, 4), np.float32),
            contract.EXEMPLAR_LABELS: np.zeros((1, self.slots), np.int64),
            contract.EXEMPLAR_VALID: np.zeros((1, self.slots), np.bool_),
        }
        options = {name: inputs[name] for name in OPTIONS if name in inputs}
        concepts = concept_inputs(inputs, len(tokens))
        first_concept = len(tokens) - len(concepts)
        scores, boxes, masks, counts = [], [], [], []
        for i, row in enumerate(tokens):
            text = call(
                contract.TEXT,
                {contract.TOKEN_IDS: row[None]},
                (contract.TEXT_FEATURES, contract.TEXT_PADDING_MASK),
            )
            if i >= first_concept:
                prompt = {**vision, **text, **concepts[i - first_concept]}
                heads = call(contract.DECODER_CT, prompt, contract.DECODER_OUTPUTS)
            else:
                prompt = {**vision, **text, **no_exemplars}
                heads = call(contract.DECODER, prompt, contract.DECODER_OUTPUTS)
            result = call(contract.POSTPROCESS, {**heads, **options}, contract.RESULT_OUTPUTS)
            decoded = as_rle_masks(result[contract.MASKS_RLE])
            scores.append(np.asarray(result[contract.SCORES], np.float32).reshape(-1))
            boxes.append(np.asarray(result[contract.BOXES], np.float32).reshape(-1, 4))
            masks.append(decoded)
            counts.append(len(decoded))
        size = (self.image_size, self.image_size)
        return {
            contract.SCORES: np.concatenate(scores),
            contract.BOXES: np.concatenate(boxes),
            contract.MASKS_RLE: RlePayload(RleMasks.concat(masks, size)),
            contract.KEYWORD_COUNTS: np.asarray(counts, np.int32),
        }

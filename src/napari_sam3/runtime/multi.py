"""`sam3_multi`: several keywords and concepts on ONE vision pass, with no cache.

The image goes through `sam3_unified_encoder` once; then `cached.ground`, the grounding logic of
`sam3_cached`, runs each query's heads on those vision tensors. Queries are the rows of
`token_ids`; when C concepts are sent (`concept_tokens` [C,T,D], `concept_padding_mask` [C,T]),
the LAST C rows are the concepts' texts and row N-C+c runs with concept c. Results are
concatenated query after query, with `keyword_counts` telling how many belong to each.
"""

from __future__ import annotations

if __package__:  # inside napari_sam3 (a real ImportError surfaces as it is)
    from napari_sam3.core import contract, validate
    from napari_sam3.runtime.cached import ground
else:  # the copies beside the Triton model, where siblings are plain modules
    import contract
    import validate
    from cached import ground


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
        vision = call(
            contract.ENCODER, {contract.IMAGES: inputs[contract.IMAGES]}, contract.GROUNDING_VISION
        )
        return ground(vision, inputs, call, self.image_size, self.slots, self.max_keywords)

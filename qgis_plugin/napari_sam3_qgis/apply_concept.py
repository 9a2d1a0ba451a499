"""apply_concept: saved concepts (.npz, from encode_concept or napari) on a raster."""

from __future__ import annotations

from .algorithm import SegmentAlgorithm


class ApplyConcept(SegmentAlgorithm):
    def name(self) -> str:
        return "apply_concept"

    def displayName(self) -> str:
        return "Apply concepts"

    def shortHelpString(self) -> str:
        return (
            "Applies portable concepts (.npz files written by 'Encode a concept', the napari "
            "panel or the library) to the whole raster, tile by tile; KEYWORDS, if given, run "
            "on the same vision pass. A concept must come from the same model. Polygons in the "
            "raster's CRS with the provenance fields (keyword: the concept's name)."
        )

    def add_prompts(self) -> None:
        self.add_concepts(optional=False)
        self.add_keywords(optional=True)

    def prompts(self, parameters, context, job, feedback) -> dict:
        return {"concepts": self.concept_files(parameters, context)}

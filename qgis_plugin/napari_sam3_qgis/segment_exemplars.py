"""segment_exemplars: objects like the exemplar polygons (and the keywords, if any)."""

from __future__ import annotations

from .algorithm import SegmentAlgorithm


class SegmentExemplars(SegmentAlgorithm):
    def name(self) -> str:
        return "segment_exemplars"

    def displayName(self) -> str:
        return "Segment by exemplars"

    def shortHelpString(self) -> str:
        return (
            "Finds objects like the EXEMPLARS (polygons in any CRS, reprojected to the raster's; "
            "EXEMPLAR_FIELD marks negatives) over the whole raster. The tiles the exemplars fall "
            "in encode concepts that steer every tile; KEYWORDS, if given, run on the same "
            "vision pass. Polygons in the raster's CRS with the provenance fields."
        )

    def add_prompts(self) -> None:
        self.add_exemplars(optional=False)
        self.add_keywords(optional=True)

    def prompts(self, parameters, context, job, feedback) -> dict:
        return {"exemplars": self.exemplars(parameters, context, job, feedback)}

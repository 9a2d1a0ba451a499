"""segment_text: keywords on a raster, tiled, every keyword on one vision pass per tile."""

from __future__ import annotations

from .algorithm import SegmentAlgorithm


class SegmentText(SegmentAlgorithm):
    def name(self) -> str:
        return "segment_text"

    def displayName(self) -> str:
        return "Segment by keywords"

    def shortHelpString(self) -> str:
        return (
            "Finds every object the keywords name (e.g. building, water) in the raster, tile by "
            "tile with seams merged; all keywords share one vision pass per tile. Polygons in "
            "the raster's CRS with score, keyword, prompt_kind, source, model_id, "
            "random_weights and area_m2. The model runs in-process from MODELS (an exported "
            "repository) or on a Triton SERVER."
        )

    def add_prompts(self) -> None:
        self.add_keywords(optional=False)

    def checkParameterValues(self, parameters, context):  # noqa: N802 (QGIS's name)
        # QGIS's own check would only say "Incorrect parameter value for KEYWORDS"
        if not self.parameterAsString(parameters, "KEYWORDS", context).strip():
            return False, (
                "nothing to look for: KEYWORDS is empty; give words such as building, water "
                "(separated by commas or semicolons)"
            )
        return super().checkParameterValues(parameters, context)

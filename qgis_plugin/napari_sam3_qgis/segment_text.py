"""segment_text: keywords on a raster, tiled, every keyword on one vision pass per tile."""

from __future__ import annotations

from qgis.core import QgsProcessing, QgsProcessingParameterFeatureSink

from .algorithm import RESULT_FILE, Sam3Algorithm
from .runner import Job


class SegmentText(Sam3Algorithm):
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

    def initAlgorithm(self, config=None) -> None:
        self.add_raster()
        self.add_keywords(optional=False)
        self.add_extent_and_bands()
        self.add_connection()
        self.add_thresholds()
        self.addParameter(
            QgsProcessingParameterFeatureSink(
                "OUTPUT", "Detections", QgsProcessing.TypeVectorPolygon
            )
        )

    def checkParameterValues(self, parameters, context):  # noqa: N802 (QGIS's name)
        # QGIS's own check would only say "Incorrect parameter value for KEYWORDS"
        if not self.parameterAsString(parameters, "KEYWORDS", context).strip():
            return False, (
                "nothing to look for: KEYWORDS is empty; give words such as building, water "
                "(separated by commas or semicolons)"
            )
        return super().checkParameterValues(parameters, context)

    def processAlgorithm(self, parameters, context, feedback):
        with Job() as job:
            task = {
                "action": "segment",
                "keywords": self.parameterAsString(parameters, "KEYWORDS", context),
                "connection": self.connection(parameters, context),
                "output": str(job.dir / RESULT_FILE),
                **self.raster(parameters, context, job),
                **self.thresholds(parameters, context),
            }
            result = job.run(task, feedback)
            return self.to_sink(result, parameters, context, feedback)

"""segment_exemplars: objects like the exemplar polygons (and the keywords, if any)."""

from __future__ import annotations

from qgis.core import QgsProcessing, QgsProcessingParameterFeatureSink

from .algorithm import RESULT_FILE, Sam3Algorithm
from .runner import Job


class SegmentExemplars(Sam3Algorithm):
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

    def initAlgorithm(self, config=None) -> None:
        self.add_raster()
        self.add_exemplars(optional=False)
        self.add_keywords(optional=True)
        self.add_extent_and_bands()
        self.add_connection()
        self.add_thresholds()
        self.addParameter(
            QgsProcessingParameterFeatureSink(
                "OUTPUT", "Detections", QgsProcessing.TypeVectorPolygon
            )
        )

    def processAlgorithm(self, parameters, context, feedback):
        with Job() as job:
            task = {
                "action": "segment",
                "keywords": self.parameterAsString(parameters, "KEYWORDS", context),
                "exemplars": self.exemplars(parameters, context, job, feedback),
                "connection": self.connection(parameters, context),
                "output": str(job.dir / RESULT_FILE),
                **self.raster(parameters, context, job),
                **self.thresholds(parameters, context),
            }
            result = job.run(task, feedback)
            return self.to_sink(result, parameters, context, feedback)

"""apply_concept: saved concepts (.npz, from encode_concept or napari) on a raster."""

from __future__ import annotations

from qgis.core import QgsProcessing, QgsProcessingParameterFeatureSink

from .algorithm import RESULT_FILE, Sam3Algorithm
from .runner import Job


class ApplyConcept(Sam3Algorithm):
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

    def initAlgorithm(self, config=None) -> None:
        self.add_raster()
        self.add_concepts(optional=False)
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
                "concepts": self.concept_files(parameters, context),
                "connection": self.connection(parameters, context),
                "output": str(job.dir / RESULT_FILE),
                **self.raster(parameters, context, job),
                **self.thresholds(parameters, context),
            }
            result = job.run(task, feedback)
            return self.to_sink(result, parameters, context, feedback)

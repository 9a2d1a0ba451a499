"""encode_concept: exemplar polygons on a raster -> one portable concept (.npz)."""

from __future__ import annotations

from qgis.core import QgsProcessingParameterFileDestination

from .algorithm import Sam3Algorithm
from .runner import Job


class EncodeConcept(Sam3Algorithm):
    def name(self) -> str:
        return "encode_concept"

    def displayName(self) -> str:
        return "Encode a concept"

    def shortHelpString(self) -> str:
        return (
            "Encodes the EXEMPLARS (polygons in any CRS; EXEMPLAR_FIELD marks negatives) on the "
            "raster into a portable concept file (.npz, no pickle) that 'Apply concepts', the "
            "napari panel and the library apply to other rasters with the same model. The "
            "exemplars must lie within one model tile (set EXTENT around them if need be)."
        )

    def initAlgorithm(self, config=None) -> None:
        self.add_raster()
        self.add_exemplars(optional=False)
        self.add_extent_and_bands()
        self.add_connection()
        self.addParameter(
            QgsProcessingParameterFileDestination("OUTPUT", "Concept", "Concept (*.npz)")
        )

    def processAlgorithm(self, parameters, context, feedback):
        output = self.parameterAsFileOutput(parameters, "OUTPUT", context)
        with Job() as job:
            task = {
                "action": "encode_concept",
                "exemplars": self.exemplars(parameters, context, job, feedback),
                "connection": self.connection(parameters, context),
                "output": output,
                **self.raster(parameters, context, job),
            }
            result = job.run(task, feedback)
        feedback.pushInfo(f"{result['concept']} -> {output}")
        return {"OUTPUT": output}

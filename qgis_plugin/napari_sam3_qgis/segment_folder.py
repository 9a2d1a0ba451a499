"""segment_folder: every raster of a folder -> one output each, resumable."""

from __future__ import annotations

from qgis.core import (
    QgsProcessingOutputNumber,
    QgsProcessingParameterBoolean,
    QgsProcessingParameterEnum,
    QgsProcessingParameterFile,
    QgsProcessingParameterFolderDestination,
    QgsProcessingParameterString,
)

from .algorithm import Sam3Algorithm
from .runner import Job

# the library's --format names: a copy of napari_sam3.core.formats.OUTPUT_FORMATS (QGIS never
# imports napari_sam3), which tests/gis/test_format_tables.py compares with it
FORMATS = ["gpkg", "geojson", "shp", "parquet", "fgb", "tif", "cog"]


class SegmentFolder(Sam3Algorithm):
    def name(self) -> str:
        return "segment_folder"

    def displayName(self) -> str:
        return "Segment a folder of rasters"

    def shortHelpString(self) -> str:
        return (
            "Segments every raster directly in INPUT_FOLDER into OUTPUT_FOLDER/<name>.<format> "
            "(polygons with the provenance fields, or a label GeoTIFF). A journal beside the "
            "outputs records each finished raster: with RESUME, a run again skips those already "
            "done with the same options (after a cancel, a crash or new files). A raster that "
            "fails is reported and the others go on. Existing outputs are replaced only with "
            "OVERWRITE."
        )

    def initAlgorithm(self, config=None) -> None:
        self.addParameter(
            QgsProcessingParameterFile(
                "INPUT_FOLDER", "Folder of rasters", behavior=QgsProcessingParameterFile.Folder
            )
        )
        self.add_keywords(optional=True)
        self.add_exemplars(optional=True)
        self.add_concepts(optional=True)
        self.addParameter(
            QgsProcessingParameterString(
                "BANDS", "Bands: 1 or 3, numbers or names (e.g. B04,B03,B02)", optional=True
            )
        )
        self.add_connection()
        self.add_thresholds()
        self.addParameter(
            QgsProcessingParameterEnum("FORMAT", "Output format", FORMATS, defaultValue=0)
        )
        self.addParameter(
            QgsProcessingParameterBoolean(
                "RESUME", "Skip rasters finished before with the same options", True
            )
        )
        self.addParameter(
            QgsProcessingParameterBoolean("OVERWRITE", "Replace existing outputs", False)
        )
        self.addParameter(QgsProcessingParameterFolderDestination("OUTPUT_FOLDER", "Outputs"))
        for name, text in (
            ("DONE", "Rasters segmented"),
            ("SKIPPED", "Rasters finished before"),
            ("FAILED", "Rasters failed"),
        ):
            self.addOutput(QgsProcessingOutputNumber(name, text))

    def processAlgorithm(self, parameters, context, feedback):
        out_dir = self.parameterAsString(parameters, "OUTPUT_FOLDER", context)
        with Job() as job:
            task = {
                "action": "segment_folder",
                "folder": self.parameterAsFile(parameters, "INPUT_FOLDER", context),
                "keywords": self.parameterAsString(parameters, "KEYWORDS", context),
                "exemplars": self.exemplars(parameters, context, job, feedback),
                "concepts": self.concept_files(parameters, context),
                "bands": self.parameterAsString(parameters, "BANDS", context),
                "format": FORMATS[self.parameterAsEnum(parameters, "FORMAT", context)],
                "resume": self.parameterAsBool(parameters, "RESUME", context),
                "overwrite": self.parameterAsBool(parameters, "OVERWRITE", context),
                "connection": self.connection(parameters, context),
                "output": out_dir,
                **self.thresholds(parameters, context),
            }
            result = job.run(task, feedback)
        for path, reason in (result.get("failures") or {}).items():
            feedback.reportError(f"failed: {path}: {reason}", False)
        feedback.pushInfo(
            f"{result['done']} segmented, {result['skipped']} finished before, "
            f"{result['failed']} failed -> {out_dir}"
        )
        return {
            "OUTPUT_FOLDER": out_dir,
            "DONE": result["done"],
            "SKIPPED": result["skipped"],
            "FAILED": result["failed"],
        }

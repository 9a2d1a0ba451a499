"""change: two dates of one place -> objects matched across them, classed and styled."""

from __future__ import annotations

from qgis.core import (
    QgsCategorizedSymbolRenderer,
    QgsFillSymbol,
    QgsProcessing,
    QgsProcessingException,
    QgsProcessingLayerPostProcessorInterface,
    QgsProcessingParameterFeatureSink,
    QgsProcessingParameterRasterLayer,
    QgsProcessingParameterString,
    QgsRendererCategory,
)

from .algorithm import RESULT_FILE, Sam3Algorithm, _number
from .runner import Job

# a copy of napari_sam3.change.style (QGIS never imports napari_sam3), which
# tests/change/test_style_copies.py compares with it
CHANGE_COLOURS = {
    "new": "#1a9850",
    "gone": "#d73027",
    "changed": "#fdae61",
    "same": "#9e9e9e",
    "unknown": "#ffffff",
}
OUTLINE_ONLY = ("unknown",)


def change_renderer() -> QgsCategorizedSymbolRenderer:
    """One category per change class, in the library's colours."""
    categories = []
    for name, colour in CHANGE_COLOURS.items():
        if name in OUTLINE_ONLY:
            style = {"style": "no", "outline_color": "#616161", "outline_style": "dash"}
        else:
            rgb = ",".join(str(int(colour[i : i + 2], 16)) for i in (1, 3, 5))
            style = {"color": f"{rgb},179", "outline_color": colour, "outline_width": "0.4"}
        symbol = QgsFillSymbol.createSimple(style)
        categories.append(QgsRendererCategory(name, symbol, name))
    return QgsCategorizedSymbolRenderer("change", categories)


class ChangeStyle(QgsProcessingLayerPostProcessorInterface):
    """Styles the change layer when QGIS loads it."""

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802 (QGIS's name)
        if layer.fields().indexOf("change") >= 0:
            layer.setRenderer(change_renderer())
            layer.triggerRepaint()


class Change(Sam3Algorithm):
    # QGIS keeps only a reference to a post-processor: it must outlive processAlgorithm
    _style = ChangeStyle()

    def name(self) -> str:
        return "change"

    def displayName(self) -> str:
        return "Change between two dates"

    def shortHelpString(self) -> str:
        return (
            "Segments BEFORE and AFTER (two rasters of one place) with the same keywords, "
            "exemplars or concepts on BEFORE's grid (AFTER warped onto it, or both at GSD), "
            "over the ground both cover, each with its own stretch, and matches their objects "
            "one to one. Each object is new, gone, changed (matched but overlapping less than "
            "CHANGED_IOU, or its area changed by more than AREA_FACTOR), same, or unknown (near "
            "the common footprint's edge or either date's fill: never counted as change). "
            "Polygons in BEFORE's CRS with both dates' scores and areas, the overlap and the "
            "provenance; before_wkt holds the before outline of a match. The layer is styled "
            "by class."
        )

    def initAlgorithm(self, config=None) -> None:
        self.addParameter(QgsProcessingParameterRasterLayer("BEFORE", "Before (earlier raster)"))
        self.addParameter(QgsProcessingParameterRasterLayer("AFTER", "After (later raster)"))
        self.add_keywords(optional=True)
        self.add_exemplars(optional=True)
        self.add_concepts(optional=True)
        self.addParameter(
            QgsProcessingParameterString(
                "BANDS", "Bands of both: 1 or 3, numbers or names (e.g. B04,B03,B02)",
                optional=True,
            )
        )  # fmt: skip
        self.addParameter(_number("GSD", "Read both at this many metres per pixel", 0))
        self.addParameter(_number("IOU", "Overlap two dates' objects need to match (0.3)", 0, 1))
        self.addParameter(_number("CHANGED_IOU", "A match overlapping less is changed (0.5)", 0, 1))
        self.addParameter(
            _number("AREA_FACTOR", "A match whose area changed more than this is changed (1.5)", 1)
        )
        self.addParameter(
            _number("EDGE", "Objects this close (m) to the edge or to fill are unknown", 0)
        )
        self.add_connection()
        self.add_thresholds()
        self.addParameter(
            QgsProcessingParameterFeatureSink("OUTPUT", "Changes", QgsProcessing.TypeVectorPolygon)
        )

    def checkParameterValues(self, parameters, context):  # noqa: N802 (QGIS's name)
        given = [
            self.parameterAsString(parameters, "KEYWORDS", context).strip(),
            parameters.get("EXEMPLARS"),
            self.concept_files(parameters, context),
        ]
        if not any(given):
            return False, (
                "nothing to look for: give KEYWORDS (e.g. building, water), EXEMPLARS or CONCEPTS"
            )
        return super().checkParameterValues(parameters, context)

    def _raster(self, parameters, name: str, context) -> str:
        layer = self.parameterAsRasterLayer(parameters, name, context)
        if layer is None:
            raise QgsProcessingException(f"{name}: no such raster layer or file")
        path = layer.source().split("|")[0]
        if layer.providerType() != "gdal":
            raise QgsProcessingException(
                f"{name} {layer.name()} is not a raster file ({layer.providerType()} layer): "
                "napari-sam3 reads rasters from files (GeoTIFF, JPEG 2000, VRT...)"
            )
        return path

    def processAlgorithm(self, parameters, context, feedback):
        before = self._raster(parameters, "BEFORE", context)
        after = self._raster(parameters, "AFTER", context)
        with Job() as job:
            task = {
                "action": "change",
                "before": before,
                "after": after,
                "keywords": self.parameterAsString(parameters, "KEYWORDS", context),
                "exemplars": self.exemplars(parameters, context, job, feedback),
                "concepts": self.concept_files(parameters, context),
                "bands": self.parameterAsString(parameters, "BANDS", context),
                "connection": self.connection(parameters, context),
                "output": str(job.dir / RESULT_FILE),
                **self.thresholds(parameters, context),
            }
            for name in ("GSD", "IOU", "CHANGED_IOU", "AREA_FACTOR", "EDGE"):
                if parameters.get(name) not in (None, ""):
                    task[name.lower()] = self.parameterAsDouble(parameters, name, context)
            result = job.run(task, feedback)
            out = self.to_sink(result, parameters, context, feedback)
        if context.willLoadLayerOnCompletion(out["OUTPUT"]):
            details = context.layerToLoadOnCompletionDetails(out["OUTPUT"])
            details.setPostProcessor(self._style)
        return out

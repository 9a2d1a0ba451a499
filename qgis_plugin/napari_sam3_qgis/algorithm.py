"""What every napari-sam3 algorithm shares: the connection and scene parameters, the inputs as
files for the worker, and the worker's result file copied into QGIS's sink.

No model logic lives here: the parameters are gathered into a job, ``runner.Job`` runs it with
napari_sam3 in its own Python, and the result comes back as a file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from qgis.core import (
    QgsApplication,
    QgsCoordinateReferenceSystem,
    QgsFeature,
    QgsFeatureSink,
    QgsFields,
    QgsProcessing,
    QgsProcessingAlgorithm,
    QgsProcessingException,
    QgsProcessingParameterBand,
    QgsProcessingParameterBoolean,
    QgsProcessingParameterDefinition,
    QgsProcessingParameterExtent,
    QgsProcessingParameterFeatureSink,
    QgsProcessingParameterFeatureSource,
    QgsProcessingParameterField,
    QgsProcessingParameterFile,
    QgsProcessingParameterMultipleLayers,
    QgsProcessingParameterNumber,
    QgsProcessingParameterRasterLayer,
    QgsProcessingParameterString,
    QgsVectorFileWriter,
    QgsVectorLayer,
)

from .runner import Job, remember_connection, remembered_connection

GROUP = "SAM3 segmentation"
# The worker's result file: FlatGeobuf (one layer, typed fields, read by any GDAL QGIS has)
RESULT_FILE = "result.fgb"


class Sam3Algorithm(QgsProcessingAlgorithm):
    """The base of the provider's algorithms (each module adds its own parameters)."""

    def createInstance(self):
        return type(self)()

    def group(self) -> str:
        return GROUP

    def groupId(self) -> str:
        return "segmentation"

    # -- parameters --------------------------------------------------------------------------
    def add_raster(self) -> None:
        self.addParameter(QgsProcessingParameterRasterLayer("INPUT", "Raster (any GDAL file)"))

    def add_keywords(self, optional: bool) -> None:
        self.addParameter(
            QgsProcessingParameterString(
                "KEYWORDS",
                "Keywords, separated by commas or semicolons (all on one vision pass)",
                optional=optional,
            )
        )

    def add_exemplars(self, optional: bool) -> None:
        self.addParameter(
            QgsProcessingParameterFeatureSource(
                "EXEMPLARS",
                "Exemplars (polygons in any CRS)",
                [QgsProcessing.TypeVectorPolygon],
                optional=optional,
            )
        )
        self.addParameter(
            QgsProcessingParameterField(
                "EXEMPLAR_FIELD",
                "Field saying positive (1, true, positive) or negative (0, false, negative); "
                "none: all positive",
                parentLayerParameterName="EXEMPLARS",
                optional=True,
            )
        )

    def add_concepts(self, optional: bool) -> None:
        self.addParameter(
            QgsProcessingParameterMultipleLayers(
                "CONCEPTS", "Concept files (.npz)", QgsProcessing.TypeFile, optional=optional
            )
        )

    def add_extent_and_bands(self) -> None:
        self.addParameter(
            QgsProcessingParameterExtent("EXTENT", "Only this extent (default: all)", optional=True)
        )
        self.addParameter(
            QgsProcessingParameterBand(
                "BANDS",
                "Bands: 1 or 3 (default: the first 3, or the only one)",
                parentLayerParameterName="INPUT",
                optional=True,
                allowMultiple=True,
            )
        )

    def add_connection(self) -> None:
        # the model line the SAM3 dock and the last run used is the default (runner.py)
        remembered = remembered_connection()
        folder = bool(remembered) and Path(remembered).expanduser().is_dir()
        self.addParameter(
            QgsProcessingParameterFile(
                "MODELS",
                "Model repository folder (run in-process), or give SERVER",
                behavior=QgsProcessingParameterFile.Folder,
                defaultValue=str(Path(remembered).expanduser()) if folder else None,
                optional=True,
            )
        )
        self.addParameter(
            QgsProcessingParameterString(
                "SERVER",
                "Triton server(s), host:port, comma-separated",
                defaultValue=remembered if remembered and not folder else None,
                optional=True,
            )
        )
        advanced = [
            QgsProcessingParameterBoolean("TLS", "Triton over TLS", defaultValue=False),
            QgsProcessingParameterFile(
                "TLS_ROOT_CERT", "TLS: the CA to trust (PEM)", optional=True
            ),
            QgsProcessingParameterFile(
                "TLS_CLIENT_CERT", "Mutual TLS: client certificate (PEM)", optional=True
            ),
            QgsProcessingParameterFile(
                "TLS_CLIENT_KEY", "Mutual TLS: client key (PEM)", optional=True
            ),
            _number("CONNECT_TIMEOUT", "Seconds to wait for a ready server (default 10)"),
            _number("REQUEST_TIMEOUT", "Seconds one request may take (default 600)"),
            _number("DEADLINE", "Seconds one call may take over all its tries"),
            QgsProcessingParameterString(
                "RUNTIME", "In-process runtime: auto, openvino or onnxruntime", optional=True
            ),
            QgsProcessingParameterString(
                "PRECISION", "In-process precision: auto, fp32, bf16 or int8", optional=True
            ),
            _number("THREADS", "In-process threads per graph (default: every core)", integer=True),
        ]
        for parameter in advanced:
            parameter.setFlags(parameter.flags() | QgsProcessingParameterDefinition.FlagAdvanced)
            self.addParameter(parameter)

    def add_thresholds(self) -> None:
        self.addParameter(_number("SCORE_THR", "Minimum score (default: the model's)", 0, 1))
        self.addParameter(_number("MAX_DET", "At most this many objects per tile", 1, integer=True))
        self.addParameter(_number("DEDUP", "Overlap that makes a duplicate (default 0.85)", 0, 1))
        self.addParameter(_number("MIN_AREA_M2", "Drop polygons smaller than this (m²)", 0))
        memory = _number(
            "MEMORY_GIB",
            "Memory a scene may take beyond the model, GiB (default: a quarter of what is "
            "free, at most 1.5)",
            0,
        )
        memory.setFlags(memory.flags() | QgsProcessingParameterDefinition.FlagAdvanced)
        self.addParameter(memory)

    # -- the job -----------------------------------------------------------------------------
    def connection(self, parameters, context) -> dict:
        """The ConnectionSpec fields the analyst set (the library holds every default)."""
        out: dict = {}
        # a default (the remembered model line) never competes with the other one given
        models = (
            self.parameterAsFile(parameters, "MODELS", context)
            if "MODELS" in parameters or "SERVER" not in parameters
            else ""
        )
        if models:
            out["repository"] = models
        server = (
            self.parameterAsString(parameters, "SERVER", context).strip()
            if "SERVER" in parameters or "MODELS" not in parameters
            else ""
        )
        if server:
            out["servers"] = server
        remember_connection(models or server)
        if self.parameterAsBool(parameters, "TLS", context):
            out["tls"] = True
        for name, field in (
            ("TLS_ROOT_CERT", "root_certificates"),
            ("TLS_CLIENT_CERT", "certificate_chain"),
            ("TLS_CLIENT_KEY", "private_key"),
        ):
            value = self.parameterAsFile(parameters, name, context)
            if value:
                out[field] = value
        for name, field in (
            ("CONNECT_TIMEOUT", "connect_timeout"),
            ("REQUEST_TIMEOUT", "request_timeout"),
            ("DEADLINE", "deadline"),
            ("THREADS", "threads"),
        ):
            value = _given(self, parameters, name, context)
            if value is not None:
                out[field] = int(value) if field == "threads" else value
        for name, field in (("RUNTIME", "runtime"), ("PRECISION", "precision")):
            value = self.parameterAsString(parameters, name, context).strip()
            if value:
                out[field] = value
        return out

    def thresholds(self, parameters, context) -> dict:
        out = {}
        for name, key in (
            ("SCORE_THR", "score_thr"),
            ("MAX_DET", "max_det"),
            ("DEDUP", "dedup"),
            ("MIN_AREA_M2", "min_area_m2"),
            ("MEMORY_GIB", "memory_budget"),
        ):
            value = _given(self, parameters, name, context)
            if value is not None:
                out[key] = int(value) if key == "max_det" else value
        if "memory_budget" in out:  # bytes; the library says what is too small
            out["memory_budget"] = int(out["memory_budget"] * 2**30)
        return out

    def raster(self, parameters, context, job: Job) -> dict:
        """INPUT as a file the worker reads (EXTENT: a VRT window of it), its bands, and where
        the run journals its finished tiles (a folder of the QGIS profile that outlives the
        job, one per raster and extent, so that RESUME finds it; the library removes it once
        the run is written). The window's VRT is kept there too: a resumed run reads the very
        same file."""
        layer = self.parameterAsRasterLayer(parameters, "INPUT", context)
        if layer is None:
            raise QgsProcessingException("INPUT: no such raster layer or file")
        path = layer.source().split("|")[0]
        if layer.providerType() != "gdal" or not Path(path).is_file():
            raise QgsProcessingException(
                f"INPUT {layer.name()} is not a raster file ({layer.providerType()} layer): "
                "napari-sam3 reads rasters from files (GeoTIFF, JPEG 2000, VRT...)"
            )
        out = {"raster": path, "source_name": Path(path).name}
        extent = None
        if parameters.get("EXTENT") not in (None, ""):
            extent = self.parameterAsExtent(parameters, "EXTENT", context, layer.crs())
        where = hashlib.sha256(f"{Path(path).resolve()}|{extent and extent.toString(9)}".encode())
        runs = Path(QgsApplication.qgisSettingsDirPath()) / "napari-sam3" / "runs"
        out["journal"] = str(runs / where.hexdigest()[:20] / "tiles")
        if extent is not None:
            out["raster"] = window_vrt(path, layer, extent, Path(out["journal"]).parent)
        bands = self.parameterAsInts(parameters, "BANDS", context)
        if bands:
            out["bands"] = bands
        return out

    def exemplars(self, parameters, context, job: Job, feedback) -> dict | None:
        """EXEMPLARS (any layer, selection honoured) as a GeoPackage in its own CRS."""
        source = self.parameterAsSource(parameters, "EXEMPLARS", context)
        if source is None:
            return None
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in source.sourceName())
        path = job.dir / f"{name or 'exemplars'}.gpkg"
        options = QgsVectorFileWriter.SaveVectorOptions()
        options.driverName = "GPKG"
        writer = QgsVectorFileWriter.create(
            str(path),
            source.fields(),
            source.wkbType(),
            source.sourceCrs(),
            context.transformContext(),
            options,
        )
        if writer.hasError():
            raise QgsProcessingException(
                f"EXEMPLARS: cannot copy the layer: {writer.errorMessage()}"
            )
        for feature in source.getFeatures():
            writer.addFeature(feature, QgsFeatureSink.FastInsert)
        del writer  # closes the file
        field = self.parameterAsString(parameters, "EXEMPLAR_FIELD", context)
        return {"path": str(path), "label_column": field or None, "name": path.stem}

    def concept_files(self, parameters, context) -> list[str]:
        return [p for p in self.parameterAsFileList(parameters, "CONCEPTS", context) if p]

    def to_sink(self, result: dict, parameters, context, feedback) -> dict:
        """The worker's file -> OUTPUT (any format QGIS writes), same fields and CRS."""
        layer = QgsVectorLayer(result["path"], "detections", "ogr")
        if not layer.isValid():
            raise QgsProcessingException(f"the result {result['path']} cannot be read back")
        fields = QgsFields()
        keep = [i for i, f in enumerate(layer.fields()) if f.name() != "fid"]
        for i in keep:
            fields.append(layer.fields().at(i))
        crs = layer.crs() if layer.crs().isValid() else QgsCoordinateReferenceSystem()
        sink, dest = self.parameterAsSink(
            parameters, "OUTPUT", context, fields, layer.wkbType(), crs
        )
        if sink is None:
            raise QgsProcessingException(self.invalidSinkError(parameters, "OUTPUT"))
        for feature in layer.getFeatures():  # all of them: a cancel here would leave a part
            out = QgsFeature(fields)
            out.setGeometry(feature.geometry())
            out.setAttributes([feature.attribute(i) for i in keep])
            sink.addFeature(out, QgsFeatureSink.FastInsert)
        counts = ", ".join(f"{k} {v}" for k, v in result.get("counts", {}).items())
        feedback.pushInfo(f"{result['features']} objects ({counts or 'nothing found'})")
        return {"OUTPUT": dest}


class SegmentAlgorithm(Sam3Algorithm):
    """An algorithm that writes detections: the raster, what to look for (`add_prompts`, and
    `prompts` for the task), the shared parameters, one polygon sink."""

    def add_prompts(self) -> None:
        raise NotImplementedError

    def prompts(self, parameters, context, job: Job, feedback) -> dict:
        """The task's entries besides KEYWORDS (exemplars, concepts)."""
        return {}

    def initAlgorithm(self, config=None) -> None:
        self.add_raster()
        self.add_prompts()
        self.add_extent_and_bands()
        self.add_connection()
        self.add_thresholds()
        resume = QgsProcessingParameterBoolean(
            "RESUME",
            "Resume: keep the tiles a stopped run of this raster finished (same keywords, "
            "settings and model); otherwise start afresh",
            defaultValue=False,
        )
        resume.setFlags(resume.flags() | QgsProcessingParameterDefinition.FlagAdvanced)
        self.addParameter(resume)
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
                **self.prompts(parameters, context, job, feedback),
                "connection": self.connection(parameters, context),
                "output": str(job.dir / RESULT_FILE),
                **self.raster(parameters, context, job),
                **self.thresholds(parameters, context),
                "resume": self.parameterAsBool(parameters, "RESUME", context),
            }
            result = job.run(task, feedback)
            return self.to_sink(result, parameters, context, feedback)


def window_vrt(path: str, layer, extent, folder: Path) -> str:
    """A VRT of the whole pixels of `path` that `extent` (in the layer's CRS) covers."""
    from osgeo import gdal

    full = layer.extent()
    part = extent.intersect(full)
    if part.isEmpty():
        raise QgsProcessingException(
            f"EXTENT {extent.toString(3)} does not overlap the raster {Path(path).name} "
            f"({full.toString(3)}, {layer.crs().authid() or 'no CRS'})"
        )
    dx = full.width() / layer.width()
    dy = full.height() / layer.height()
    col0 = int((part.xMinimum() - full.xMinimum()) // dx)
    row0 = int((full.yMaximum() - part.yMaximum()) // dy)
    col1 = min(layer.width(), int(-(-(part.xMaximum() - full.xMinimum()) // dx)))
    row1 = min(layer.height(), int(-(-(full.yMaximum() - part.yMinimum()) // dy)))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{Path(path).stem}.vrt"
    if target.is_file():  # made for this raster and extent by an earlier run: the same window
        return str(target)
    dataset = gdal.Translate(
        str(target), path, format="VRT", srcWin=[col0, row0, col1 - col0, row1 - row0]
    )
    if dataset is None:
        raise QgsProcessingException(f"EXTENT: GDAL cannot cut a window of {path}")
    dataset = None
    return str(target)


def _number(
    name: str, text: str, low: float | None = None, high: float | None = None, integer=False
) -> QgsProcessingParameterNumber:
    kind = QgsProcessingParameterNumber.Integer if integer else QgsProcessingParameterNumber.Double
    parameter = QgsProcessingParameterNumber(name, text, kind, optional=True)
    if low is not None:
        parameter.setMinimum(low)
    if high is not None:
        parameter.setMaximum(high)
    return parameter


def _given(algorithm, parameters, name: str, context):
    """A number the analyst gave, or None (left empty: the library's default)."""
    if parameters.get(name) in (None, ""):
        return None
    return algorithm.parameterAsDouble(parameters, name, context)

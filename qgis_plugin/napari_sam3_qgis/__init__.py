"""napari-sam3 for QGIS: a Processing provider over the napari_sam3 library.

QGIS loads this plugin; the model runs in napari-sam3's own Python (see runner.py and worker.py).
"""


def classFactory(iface):  # noqa: N802 (QGIS's name)
    from .plugin import Sam3Plugin

    return Sam3Plugin(iface)

"""The plugin QGIS starts: it registers the Processing provider (GUI and qgis_process alike)."""

from __future__ import annotations

from qgis.core import QgsApplication

from .provider import Sam3Provider


class Sam3Plugin:
    def __init__(self, iface) -> None:
        self.iface = iface
        self.provider = None

    def initProcessing(self) -> None:  # noqa: N802 (QGIS's name)
        if self.provider is None:
            self.provider = Sam3Provider()
            QgsApplication.processingRegistry().addProvider(self.provider)

    def initGui(self) -> None:  # noqa: N802
        self.initProcessing()

    def unload(self) -> None:
        from .engine import stop_shared

        stop_shared()  # the warm engine's process ends with the plugin
        if self.provider is not None:
            QgsApplication.processingRegistry().removeProvider(self.provider)
            self.provider = None

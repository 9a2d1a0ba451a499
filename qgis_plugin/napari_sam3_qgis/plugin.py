"""The plugin QGIS starts: it registers the Processing provider (GUI and qgis_process alike) and,
in the QGIS application, the SAM3 dock beside the map."""

from __future__ import annotations

from qgis.core import QgsApplication

from .provider import ICON, Sam3Provider


class Sam3Plugin:
    def __init__(self, iface) -> None:
        self.iface = iface
        self.provider = None
        self.dock = None
        self.action = None

    def initProcessing(self) -> None:  # noqa: N802 (QGIS's name)
        if self.provider is None:
            self.provider = Sam3Provider()
            QgsApplication.processingRegistry().addProvider(self.provider)

    def initGui(self) -> None:  # noqa: N802
        self.initProcessing()
        if self.iface is None:
            return
        from qgis.PyQt.QtCore import Qt
        from qgis.PyQt.QtGui import QIcon

        from .dock import Sam3Dock
        from .engine import shared

        window = self.iface.mainWindow()
        self.dock = Sam3Dock(self.iface.mapCanvas(), self.iface.messageBar(), shared, window)
        self.iface.addDockWidget(Qt.RightDockWidgetArea, self.dock)
        self.dock.hide()
        self.action = self.dock.toggleViewAction()
        self.action.setIcon(QIcon(str(ICON)))
        self.action.setText("SAM3 dock")
        self.action.setToolTip("SAM3: click, box, keywords and exemplars on the map")
        self.iface.addToolBarIcon(self.action)
        self.iface.addPluginToRasterMenu("napari-sam3", self.action)

    def unload(self) -> None:
        if self.dock is not None:
            self.dock.unload()
            self.iface.removeToolBarIcon(self.action)
            self.iface.removePluginRasterMenu("napari-sam3", self.action)
            self.iface.removeDockWidget(self.dock)
            self.dock.deleteLater()
            self.dock = self.action = None
        from .engine import stop_shared

        stop_shared()  # the warm engine's process ends with the plugin
        if self.provider is not None:
            QgsApplication.processingRegistry().removeProvider(self.provider)
            self.provider = None

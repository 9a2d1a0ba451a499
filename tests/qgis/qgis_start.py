"""QGIS started in a test driver as the application starts: its settings are the profile's
QGIS/QGIS3.ini, and the plugins installed there are importable. Imported by the drivers, which
run in QGIS's own Python with this folder on sys.path."""

from __future__ import annotations

from qgis.core import QgsApplication
from qgis.PyQt.QtCore import QCoreApplication, QSettings


def start_qgis(profile: str, gui: bool = False) -> QgsApplication:
    QCoreApplication.setOrganizationName(QgsApplication.QGIS_ORGANIZATION_NAME)
    QCoreApplication.setOrganizationDomain(QgsApplication.QGIS_ORGANIZATION_DOMAIN)
    QCoreApplication.setApplicationName(QgsApplication.QGIS_APPLICATION_NAME)
    QSettings.setDefaultFormat(QSettings.IniFormat)
    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, profile)
    app = QgsApplication([], gui, profile)
    app.initQgis()
    return app

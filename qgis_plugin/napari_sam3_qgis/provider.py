"""The Processing provider `napari_sam3`: its algorithms and its one setting (which Python)."""

from __future__ import annotations

from pathlib import Path

from qgis.core import QgsProcessingProvider
from qgis.PyQt.QtGui import QIcon

from .apply_concept import ApplyConcept
from .change import Change
from .encode_concept import EncodeConcept
from .runner import SETTING, default_python
from .segment_exemplars import SegmentExemplars
from .segment_folder import SegmentFolder
from .segment_text import SegmentText

ICON = Path(__file__).with_name("icon.png")


class Sam3Provider(QgsProcessingProvider):
    def id(self) -> str:
        return "napari_sam3"

    def name(self) -> str:
        return "napari-sam3"

    def longName(self) -> str:
        return "napari-sam3: SAM3 segmentation of satellite and aerial imagery"

    def icon(self) -> QIcon:
        return QIcon(str(ICON))

    def load(self) -> bool:
        try:  # the setting's row in Settings > Options > Processing > Providers
            from processing.core.ProcessingConfig import ProcessingConfig, Setting

            ProcessingConfig.settingIcons[self.name()] = self.icon()
            ProcessingConfig.addSetting(
                Setting(
                    self.name(),
                    SETTING,
                    "Python with napari-sam3 (the environment install_qgis_plugin.sh makes: "
                    f"{default_python()})",
                    "",
                    valuetype=Setting.FILE,
                )
            )
            ProcessingConfig.readSettings()
        except ImportError:  # no Processing plugin: the setting is read from QgsSettings alone
            pass
        self.refreshAlgorithms()
        return True

    def unload(self) -> None:
        try:
            from processing.core.ProcessingConfig import ProcessingConfig

            ProcessingConfig.removeSetting(SETTING)
        except ImportError:
            pass

    def loadAlgorithms(self) -> None:
        for algorithm in (
            SegmentText(),
            SegmentExemplars(),
            EncodeConcept(),
            ApplyConcept(),
            SegmentFolder(),
            Change(),
        ):
            self.addAlgorithm(algorithm)

"""napari dock widgets of napari-sam3: the SAM3 panel, the results table and the STAC search
form (contributed by napari.yaml); the panel's parts (connection, one widget per mode) are exported as well.

The widgets only gather inputs and show results: the segmentation is `napari_sam3.client.sam3`'s,
the layer conversions are in `_layers`.
"""

from napari_sam3.plugin.widgets.change import ChangeWidget
from napari_sam3.plugin.widgets.concepts import ConceptsWidget
from napari_sam3.plugin.widgets.connection import ConnectionWidget
from napari_sam3.plugin.widgets.interactive import InteractiveWidget
from napari_sam3.plugin.widgets.panel import Sam3Panel
from napari_sam3.plugin.widgets.results_table import ResultsTable
from napari_sam3.plugin.widgets.scene import SceneWidget
from napari_sam3.plugin.widgets.stac_search import StacSearchWidget
from napari_sam3.plugin.widgets.text import TextWidget

__all__ = [
    "ChangeWidget",
    "ConceptsWidget",
    "ConnectionWidget",
    "InteractiveWidget",
    "ResultsTable",
    "Sam3Panel",
    "SceneWidget",
    "StacSearchWidget",
    "TextWidget",
]

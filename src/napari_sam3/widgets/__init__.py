"""napari dock widgets of napari-sam3: the SAM3 panel and the results table (contributed by
napari.yaml); the panel's parts (connection, one widget per mode) are exported as well.

The widgets only gather inputs and show results: the segmentation is `napari_sam3.client`'s,
the layer conversions are in `_layers`.
"""

from .concepts import ConceptsWidget
from .connection import ConnectionWidget
from .interactive import InteractiveWidget
from .panel import Sam3Panel
from .results_table import ResultsTable
from .scene import SceneWidget
from .text import TextWidget

__all__ = [
    "ConceptsWidget",
    "ConnectionWidget",
    "InteractiveWidget",
    "ResultsTable",
    "Sam3Panel",
    "SceneWidget",
    "TextWidget",
]

"""napari dock widgets of napari-sam3 (contributed by napari.yaml).

The widgets only gather inputs and show results: the segmentation is `napari_sam3.client`'s,
the layer conversions are in `_layers`.
"""

from .concepts import ConceptsWidget
from .connection import ConnectionWidget
from .interactive import InteractiveWidget
from .multi import MultiKeywordWidget
from .panel import Sam3Panel
from .results_table import ResultsTable
from .scene import SceneWidget
from .segment import SegmentWidget
from .text import TextWidget

__all__ = [
    "ConceptsWidget",
    "ConnectionWidget",
    "InteractiveWidget",
    "MultiKeywordWidget",
    "ResultsTable",
    "Sam3Panel",
    "SceneWidget",
    "SegmentWidget",
    "TextWidget",
]

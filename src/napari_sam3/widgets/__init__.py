"""napari dock widgets of napari-sam3 (contributed by napari.yaml).

The widgets only gather inputs and show results: the segmentation is `napari_sam3.client`'s,
the layer conversions are in `_layers`.
"""

from .concepts import ConceptsWidget
from .connection import ConnectionWidget
from .interactive import InteractiveWidget
from .multi import MultiKeywordWidget
from .scene import SceneWidget
from .segment import SegmentWidget

__all__ = [
    "ConceptsWidget",
    "ConnectionWidget",
    "InteractiveWidget",
    "MultiKeywordWidget",
    "SceneWidget",
    "SegmentWidget",
]

"""How the change classes are drawn, in napari and QGIS alike (QGIS's provider keeps a copy,
which tests/change/test_style_copies.py compares with this one)."""

from __future__ import annotations

from napari_sam3.change.classify import CHANGE_CLASSES

# fill colours, colour-blind safe on a satellite background: new green, gone red, changed
# orange; same and unknown grey (unknown is drawn as an outline only: it is not a finding)
CHANGE_COLOURS = {
    "new": "#1a9850",
    "gone": "#d73027",
    "changed": "#fdae61",
    "same": "#9e9e9e",
    "unknown": "#ffffff",
}
OUTLINE_ONLY = ("unknown",)

assert tuple(CHANGE_COLOURS) == CHANGE_CLASSES

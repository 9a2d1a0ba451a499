"""The change classes' colours: one table (napari_sam3.change.style), and QGIS's copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

from napari_sam3.change import CHANGE_CLASSES
from napari_sam3.change.style import CHANGE_COLOURS, OUTLINE_ONLY

QGIS_CHANGE = Path(__file__).resolve().parents[2] / "qgis_plugin" / "napari_sam3_qgis" / "change.py"


def _qgis_value(name: str):
    for node in ast.parse(QGIS_CHANGE.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{QGIS_CHANGE} defines no {name}")


def test_every_class_has_a_colour_in_the_class_order():
    assert tuple(CHANGE_COLOURS) == CHANGE_CLASSES
    assert set(OUTLINE_ONLY) <= set(CHANGE_CLASSES)


def test_qgis_copy_is_the_library_s_table():
    assert _qgis_value("CHANGE_COLOURS") == CHANGE_COLOURS
    assert tuple(_qgis_value("OUTLINE_ONLY")) == tuple(OUTLINE_ONLY)

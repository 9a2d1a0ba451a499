"""What changed between dates: the objects of two (or more) scenes of one place matched and
classed ``new``, ``gone``, ``changed``, ``same`` or ``unknown``.

:func:`compare` works on two detection tables in map coordinates (:mod:`.match`,
:mod:`.classify`); :func:`change_between` segments the scenes with one query on a common grid
first (:mod:`.grid`, :mod:`.run`), :func:`change_to_file` writes the result (:func:`write_changes`).
"""

from __future__ import annotations

from napari_sam3.change.classify import CHANGE_CLASSES, compare
from napari_sam3.change.run import ChangeSummary, change_between, change_to_file, write_changes

__all__ = [
    "CHANGE_CLASSES",
    "ChangeSummary",
    "change_between",
    "change_to_file",
    "compare",
    "write_changes",
]

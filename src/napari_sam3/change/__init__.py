"""What changed between dates: the objects of two (or more) scenes of one place matched and
classed ``new``, ``gone``, ``changed``, ``same`` or ``unknown``.

:func:`compare` works on two detection tables in map coordinates (:mod:`.match`,
:mod:`.classify`); :func:`change_between` segments the scenes with one query on a common grid
first (:mod:`.grid`, :mod:`.run`) and :func:`change_to_file` writes the result.
"""

from __future__ import annotations

from napari_sam3.change.classify import CHANGE_CLASSES, compare

__all__ = ["CHANGE_CLASSES", "compare"]

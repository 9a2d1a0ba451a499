"""How a scene is read and run: one frozen value beside the query.

The query says what to look for (:class:`~napari_sam3.prompts.query.Query`); these settings say
how the raster is cut, read and scheduled. They never change what is found in a tile, except
``tile_size``, ``overlap``, ``bands``, ``stats``, ``nodata``, ``gsd`` and ``aoi``, which change
what the model sees, and ``seam_iou``, which decides joins across tiles.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.bands import BandKey
from napari_sam3.imagery.stretch import StretchStats
from napari_sam3.imagery.validity import NodataLike

__all__ = ["SceneSettings"]


@dataclass(frozen=True)
class SceneSettings:
    """How to run a scene (see :func:`~napari_sam3.scene.segment_scene` for each one).

    Args:
        tile_size: tile side in scene pixels; default the model's input size.
        overlap: pixels shared by neighbouring tiles; default tile_size // 8.
        bands: the 1 or 3 bands to use (1-based or names); default the file's own RGB.
        stats: stretch limits; default one stretch of the whole scene.
        nodata: the nodata value, or ``"none"``; default the raster's own.
        gsd: metres on the ground per model pixel (the scene resampled to that grid).
        aoi: an area of interest (a bbox in EPSG:4326, a ``Bbox``, a vector file or GeoDataFrame).
        assets: a STAC item's assets to use instead of its RGB ones.
        seam_iou: how well two pieces must agree in their tiles' overlap to be joined.
        in_flight: model requests at once; default the engine's concurrency.
        memory_budget: bytes (or ``"1.5GB"``) the run may take beyond the engine.
    """

    tile_size: int | None = None
    overlap: int | None = None
    bands: Sequence[BandKey] | None = None
    stats: StretchStats | None = None
    nodata: NodataLike = None
    gsd: float | None = None
    aoi: Any = None
    assets: Sequence[str] | None = None
    seam_iou: float = 0.5
    in_flight: int | None = None
    memory_budget: int | str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "seam_iou", validate.unit_interval("seam_iou", self.seam_iou, open_low=True))
        if self.bands is not None:
            if isinstance(self.bands, str | int):
                raise InvalidInput(
                    f"bands must be a list such as [4, 3, 2] or ['red', 'green', 'blue'], "
                    f"got {self.bands!r}"
                )
            put(self, "bands", tuple(self.bands))
        if self.assets is not None:
            put(self, "assets", tuple(self.assets))
        if self.in_flight is not None:
            put(self, "in_flight", validate.positive_int("in_flight", self.in_flight, 256))
        if self.gsd is not None and not (
            isinstance(self.gsd, int | float) and 0 < self.gsd < float("inf")
        ):
            raise InvalidInput(
                f"gsd must be a positive number of metres, e.g. 10, got {self.gsd!r}"
            )

    def replace(self, **changes: Any) -> SceneSettings:
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """What identifies the settings that change detections (not in_flight, not the budget)."""
        ident = {
            name: _plain(getattr(self, name))
            for name in (
                "tile_size", "overlap", "bands", "stats", "nodata", "gsd", "aoi", "assets",
                "seam_iou",
            )
        }  # fmt: skip
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


FIELDS = frozenset(f.name for f in dataclasses.fields(SceneSettings))


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return repr(value)

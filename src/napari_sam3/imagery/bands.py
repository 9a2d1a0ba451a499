"""Which band a band argument means: the one rule for every ``bands=`` in napari-sam3.

- An integer is a **1-based** band index, as in GDAL and rasterio: ``1..count``. So
  ``bands=(4, 3, 2)`` picks the same Sentinel-2 bands from a file, a
  :class:`~napari_sam3.imagery.raster.Raster`, its ``.data``, a napari layer and the command line.
- A string is a band **name**, matched case-insensitively (``"b04"`` finds ``"B04"``); the first
  band of that name wins. Names need something that knows them (a Raster, a layer read by the
  plugin); a plain array has none.
- Typed text (a widget field, ``--bands``) is split on commas, semicolons and whitespace; an item
  made of digits is an index, anything else a name (:func:`parse_bands`).

Anything else (0, a float, a bool, a name that is not there) is a ValueError that lists the
valid bands.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

BandKey = int | str


def resolve_band(
    key: BandKey, count: int, names: Sequence[str] | None = None, where: str = "the image"
) -> int:
    """The 0-based position (into a bands-first array) of band ``key`` among ``count`` bands.

    ``names`` are the bands' names in order (or None when unknown); ``where`` names the image in
    error messages.
    """
    if isinstance(key, str):
        if not names:
            raise ValueError(
                f"{where} has no band names, so band {key!r} cannot be found by name; pass "
                f"1-based band indices (1..{count}), e.g. bands=(4, 3, 2), or read the file with "
                "read_raster, whose Raster knows its band names."
            )
        wanted = key.strip().lower()
        for i, name in enumerate(names):
            if str(name).lower() == wanted:
                return i
        raise ValueError(f"{where} has no band named {key!r}; its bands are {_listing(names)}.")
    if isinstance(key, int | np.integer) and not isinstance(key, bool | np.bool_):
        if not 1 <= key <= count:
            known = f" ({_listing(names)})" if names else ""
            raise ValueError(
                f"band {int(key)} is out of range for {where}, which has {count} band(s){known}; "
                f"band indices are 1-based (1..{count}), as in GDAL and rasterio."
            )
        return int(key) - 1
    raise ValueError(
        f"a band is a 1-based index or a name, got {key!r}; "
        + (f"{where}'s bands are {_listing(names)}." if names else f"use 1..{count}.")
    )


def resolve_bands(
    keys: Sequence[BandKey],
    count: int,
    names: Sequence[str] | None = None,
    where: str = "the image",
) -> list[int]:
    """:func:`resolve_band` for each key, in order (repeats allowed)."""
    return [resolve_band(k, count, names, where) for k in keys]


def parse_bands(text: str | None) -> list[BandKey] | None:
    """'B04, B03, B02' or '4 3 2' -> band keys (1-based indices or names); '' or None -> None."""
    items = [t for t in re.split(r"[,;\s]+", (text or "").strip()) if t]
    if not items:
        return None
    return [int(t) if t.isdigit() else t for t in items]


def _listing(names: Sequence[str] | None) -> str:
    return ", ".join(f"{i} {n}" for i, n in enumerate(names or (), start=1))

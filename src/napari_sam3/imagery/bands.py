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

from napari_sam3.core.errors import InvalidInput

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
            raise InvalidInput(
                f"{where} has no band names, so band {key!r} cannot be found by name; pass "
                f"1-based band indices (1..{count}), e.g. bands=(4, 3, 2), or read the file with "
                "read_raster, whose Raster knows its band names."
            )
        wanted = key.strip().lower()
        for i, name in enumerate(names):
            if str(name).lower() == wanted:
                return i
        raise InvalidInput(f"{where} has no band named {key!r}; its bands are {_listing(names)}.")
    if isinstance(key, int | np.integer) and not isinstance(key, bool | np.bool_):
        if not 1 <= key <= count:
            known = f" ({_listing(names)})" if names else ""
            raise InvalidInput(
                f"band {int(key)} is out of range for {where}, which has {count} band(s){known}; "
                f"band indices are 1-based (1..{count}), as in GDAL and rasterio."
            )
        return int(key) - 1
    raise InvalidInput(
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


# -- which bands the model gets when none are chosen ---------------------------------------------
# Colour interpretation first (GDAL's, as QGIS and GDAL's tools read it), then band names
# (descriptions, STAC common names), then position. An alpha band is never a colour.
_ROLE_NAMES = {"red": ("red", "r"), "green": ("green", "g"), "blue": ("blue", "b")}


def model_bands(
    count: int,
    roles: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    where: str = "the image",
    four_is_rgba: bool = False,
) -> tuple[list[int], str]:
    """The 0-based bands that make the model's RGB (or its one grey band) when the caller chose
    none, and why. ``roles`` are the bands' colour interpretations (``"red"``, ``"alpha"``,
    ``"gray"``, ``"undefined"`` ...), ``names`` their names. ``four_is_rgba``: a 4-band array
    without roles is RGBA (napari's and PIL's convention for uint8 arrays); a file's fourth band
    is alpha only when its colour interpretation says so.

    Raises ValueError (naming the bands) when roles and count leave the choice open.
    """
    roles = [str(r).lower() for r in roles] if roles else []
    colours = [i for i in range(count) if not roles or roles[i] != "alpha"]
    rgb = _by(roles, ("red", "green", "blue"))
    if rgb:
        return rgb, "colour interpretation " + "/".join(str(i + 1) for i in rgb) + " = R/G/B"
    lowered = [str(n).strip().lower() for n in names] if names else []
    rgb = _by_names(lowered)
    if rgb:
        return rgb, "band names " + ", ".join(str(names[i]) for i in rgb) + " = R, G, B"
    if len(colours) == 1:
        return colours, "one band: grey"
    if len(colours) == 3 and count > 3:
        alpha = [i for i in range(count) if i not in colours]
        return colours, f"bands {_numbers(colours)} as R, G, B; alpha band {_numbers(alpha)}"
    if len(colours) == 3 and count == 3:
        return colours, "3 bands in file order as R, G, B (no colour interpretation says otherwise)"
    if four_is_rgba and not roles and count == 4:
        return [0, 1, 2], "RGBA: bands 1-3 as R, G, B, band 4 alpha"
    described = ""
    if names or roles:
        described = " (" + ", ".join(_band(i, names, roles) for i in range(count)) + ")"
    raise InvalidInput(
        f"{where} has {count} bands{described}; choose 3 for RGB (or 1 for grey) with bands=, "
        "e.g. bands=(4, 3, 2) for Sentinel-2 true colour (1-based indices"
        + (", or band names" if names else "")
        + "): nothing says which bands are red, green and blue"
    )


def _band(i: int, names: Sequence[str] | None, roles: Sequence[str]) -> str:
    text = f"{i + 1}"
    if names:
        text += f" {names[i]}"
    if roles and roles[i] not in ("undefined", ""):
        text += f" ({roles[i]})"
    return text


def _by(roles: list[str], wanted: tuple[str, ...]) -> list[int] | None:
    found = []
    for role in wanted:
        hits = [i for i, r in enumerate(roles) if r == role]
        if len(hits) != 1:
            return None
        found.append(hits[0])
    return found


def _by_names(names: list[str]) -> list[int] | None:
    found = []
    for role in ("red", "green", "blue"):
        hits = [i for i, n in enumerate(names) if n in _ROLE_NAMES[role]]
        if len(hits) != 1:
            return None
        found.append(hits[0])
    return found


def _numbers(indices: Sequence[int]) -> str:
    return ", ".join(str(i + 1) for i in indices)

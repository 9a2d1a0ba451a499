"""STAC items as scenes: which assets make the picture, read with pystac.

An item (a ``.json`` file or URL) is a scene: its red, green and blue assets, found by
:func:`item_bands`, are the rasters to stack (one Cloud-Optimised GeoTIFF per band, as Sentinel-2
and Landsat collections ship them), or its one ``visual`` asset. A static catalog or collection is
a folder of such scenes (:func:`catalog_items`).

Items are read by pystac through :class:`_StacIO`: a local file, or a URL fetched with the
network rules of :mod:`napari_sam3.imagery.remote` (timeouts, retries, credentials from the
environment), at most 16 MiB. Asset links are checked before any is used: an item read from a
server may only point at ``http(s)`` URLs; a local item at local files or ``http(s)`` URLs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pystac
from pystac.extensions.eo import EOExtension

from napari_sam3.core.errors import MissingFile, Sam3Error
from napari_sam3.imagery.remote import MAX_JSON_BYTES, fetch_bytes, file_name, is_remote

__all__ = [
    "RGB_ASSET_KEYS",
    "LoadedItem",
    "StacError",
    "catalog_items",
    "is_stac",
    "item_bands",
    "parse_assets",
    "read_stac",
    "scene_source",
]

# Asset keys that hold red, green, blue, in the order of the common collections; then a key
# whose one asset is an RGB picture.
RGB_ASSET_KEYS = (("red", "green", "blue"), ("B04", "B03", "B02"), ("B4", "B3", "B2"))
VISUAL_KEYS = ("visual", "rgb", "true_color", "tci")
_COMMON = ("red", "green", "blue")


class StacError(Sam3Error, ValueError):
    """A STAC file that cannot be used as a scene (not STAC, no RGB assets, a bad asset link)."""


class LoadedItem(str):
    """An item read already (found by a STAC API search): its URL as a string, named by its id
    (``.name``, ``.stem``: one output per item), read as the item itself (:func:`read_stac`)."""

    item: Any

    @classmethod
    def of(cls, item: Any, api: str = "") -> LoadedItem:
        href = (
            item.get_self_href()
            or f"{api.rstrip('/')}/collections/{item.collection_id}/items/{item.id}"
        )
        loaded = cls(href)
        loaded.item = item
        return loaded

    @property
    def name(self) -> str:
        return self.item.id

    @property
    def stem(self) -> str:
        """The id as a file name (a character a file name cannot hold becomes ``_``)."""
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.item.id).lstrip(".") or "item"


def is_stac(source: Any) -> bool:
    """Whether ``source`` is a STAC document: a pystac object, an item found by a search, or a
    path or URL ending in .json."""
    if isinstance(source, pystac.STACObject | LoadedItem):
        return True
    if not isinstance(source, str | os.PathLike):
        return False
    return file_name(source).lower().endswith(".json")


def parse_assets(text: str | Sequence[str] | None) -> list[str] | None:
    """``--assets B08,B04,B03`` -> ['B08', 'B04', 'B03'] (None or '' -> None)."""
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    keys = [str(k).strip() for k in items if str(k).strip()]
    return keys or None


def read_stac(source: Any) -> Any:
    """The pystac Item, Collection or Catalog at ``source`` (a path, a URL, or a pystac object)."""
    if isinstance(source, pystac.STACObject):
        return source
    if isinstance(source, LoadedItem):
        return source.item
    href = os.fspath(source)
    try:
        if is_remote(href):
            return pystac.read_file(href, _StacIO(remote_only=True))
        return pystac.read_file(str(Path(href).resolve()), _StacIO())
    except Sam3Error:
        raise
    except FileNotFoundError:
        raise MissingFile(f"STAC file not found: {href}") from None
    except (
        pystac.STACError,
        pystac.STACTypeError,
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
    ) as error:
        raise StacError(
            f"{href} is not a STAC item, collection or catalog pystac can read ({error})"
        ) from None


def item_bands(item: Any, assets: Sequence[str] | None = None) -> list[str]:
    """The hrefs (absolute) of the assets that make the item's picture, in band order.

    ``assets`` names them (keys of ``item.assets``); by default the assets whose ``eo:bands``
    common names are red, green and blue, else the keys red/green/blue, B04/B03/B02 or B4/B3/B2,
    else one ``visual`` asset.
    """
    if not isinstance(item, pystac.Item):
        raise StacError(
            f"{_describe(item)} is a {type(item).__name__}, not an item; give one of its items "
            "(a catalog or collection is a folder of scenes for the command line)"
        )
    available = list(item.assets)
    if assets is not None:
        keys = parse_assets(assets) or []
        missing = [k for k in keys if k not in item.assets]
        if missing or not keys:
            raise StacError(
                f"item {item.id} has no asset {', '.join(missing) or '(none given)'}; its assets "
                f"are {', '.join(available) or 'none'}"
            )
        if len(keys) not in (1, 3):
            raise StacError(
                f"--assets takes 1 or 3 assets (one RGB asset, or red, green, blue bands), "
                f"got {len(keys)}: {', '.join(keys)}"
            )
    else:
        keys = _rgb_keys(item)
        if keys is None:
            raise StacError(
                f"item {item.id}: no red, green and blue assets found (by eo:bands common names "
                f"or the keys red/green/blue, B04/B03/B02, visual); choose them with --assets "
                f"(assets=), e.g. --assets a,b,c from: {', '.join(available) or 'none'}"
            )
    return [_checked_href(item, key) for key in keys]


def scene_source(source: Any, assets: Sequence[str] | None = None) -> Any:
    """What :func:`~napari_sam3.imagery.raster.read_raster` reads for ``source``: a STAC item
    becomes its band hrefs (one href for a single asset); anything else is returned as is."""
    if not is_stac(source):
        if assets is not None:
            raise StacError("assets= (--assets) chooses the assets of a STAC item; give an item")
        return source
    hrefs = item_bands(read_stac(source), assets)
    return hrefs[0] if len(hrefs) == 1 else hrefs


def catalog_items(source: Any, limit: int = 10_000) -> list[Any]:
    """Every item of a static catalog or collection (children followed), or ``[item]``."""
    stac = read_stac(source)
    if isinstance(stac, pystac.Item):
        return [stac]
    items = []
    try:
        for item in stac.get_items(recursive=True):
            items.append(item)
            if len(items) > limit:
                raise StacError(f"{_describe(stac)} holds more than {limit} items; split it")
    except Sam3Error:
        raise
    except (pystac.STACError, pystac.STACTypeError, KeyError, TypeError, ValueError) as error:
        ours = _cause(error)
        if ours is not None:  # a child that could not be fetched: our error names it
            raise ours from None
        raise StacError(f"cannot walk {_describe(stac)}: {error}") from None
    if not items:
        raise StacError(f"{_describe(stac)} holds no items")
    return items


# ----------------------------------------------------------------------------- internals


def _rgb_keys(item: Any) -> list[str] | None:
    by_common: dict[str, str] = {}
    for key, asset in item.assets.items():
        names = _common_names(item, asset)
        if len(names) == 1 and names[0] in _COMMON:
            by_common.setdefault(names[0], key)
    if all(c in by_common for c in _COMMON):
        return [by_common[c] for c in _COMMON]
    lower = {k.lower(): k for k in item.assets}
    for wanted in RGB_ASSET_KEYS:
        if all(w.lower() in lower for w in wanted):
            return [lower[w.lower()] for w in wanted]
    for key in VISUAL_KEYS:
        if key in lower:
            return [lower[key]]
    return None


def _common_names(item: Any, asset: Any) -> list[str]:
    """The common names of an asset's bands: STAC 1.0 ``eo:bands`` (pystac's EO extension), or
    STAC 1.1 ``bands`` with ``eo:common_name``."""
    if EOExtension.has_extension(item):
        bands = EOExtension.ext(asset).bands or []
        names = [b.common_name for b in bands]
        if names and all(names):
            return [str(n).lower() for n in names]
    bands = asset.extra_fields.get("bands")
    if isinstance(bands, list) and bands and all(isinstance(b, dict) for b in bands):
        names = [b.get("eo:common_name") for b in bands]
        if all(isinstance(n, str) for n in names):
            return [n.lower() for n in names]
    return []


def _checked_href(item: Any, key: str) -> str:
    """An asset's absolute href, if it is one we may open: http(s) from anywhere; a local file
    only from a local item (an item from a server never points us at this machine's files)."""
    asset = item.assets[key]
    href = asset.get_absolute_href() or asset.href
    scheme = urlparse(href).scheme.lower()
    origin = item.get_self_href() or ""
    if scheme in ("http", "https"):
        return href
    local = scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")
    if local and not is_remote(origin) and not href.startswith("/vsi"):
        return href.removeprefix("file://")
    raise StacError(
        f"item {item.id}: asset {key!r} points at {href!r}; an item may point at http(s) URLs "
        "(and, from a local item, local files) only"
    )


def _cause(error: BaseException) -> Sam3Error | None:
    """Our own error among ``error``'s causes (pystac wraps what a link's read raised)."""
    seen = error.__cause__
    while seen is not None and not isinstance(seen, Sam3Error):
        seen = seen.__cause__
    return seen


def _describe(stac: Any) -> str:
    href = getattr(stac, "get_self_href", lambda: None)()
    return f"{type(stac).__name__} {getattr(stac, 'id', '?')}" + (f" ({href})" if href else "")


class _StacIO(pystac.StacIO):
    """pystac's reads, local or over HTTP with our network rules; writes refused. Once a
    document came from a server, every link followed must be http(s) too."""

    def __init__(self, remote_only: bool = False) -> None:
        super().__init__()
        self.remote_only = remote_only

    def read_text(self, source: Any, *args: Any, **kwargs: Any) -> str:
        href = os.fspath(getattr(source, "href", source))
        if self.remote_only and not is_remote(href):
            raise StacError(f"a STAC document from a server links to {href!r}, not http(s)")
        if is_remote(href):
            self.remote_only = True
            data = fetch_bytes(href, MAX_JSON_BYTES)
        else:
            path = Path(href.removeprefix("file://"))
            if path.stat().st_size > MAX_JSON_BYTES:
                raise StacError(
                    f"{path} is larger than {MAX_JSON_BYTES // 2**20} MiB: not STAC JSON"
                )
            data = path.read_bytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise StacError(f"{href} is not JSON text (STAC)") from None

    def write_text(self, dest: Any, txt: str, *args: Any, **kwargs: Any) -> None:
        raise StacError("napari-sam3 reads STAC; it does not write it")

    def json_loads(self, txt: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        import json

        try:
            value = json.loads(txt)
        except ValueError as error:
            raise StacError(f"not JSON: {error}") from None
        if not isinstance(value, dict):
            raise StacError("not a STAC object (the JSON is not an object)")
        return value


def looks_like_stac(source: Any) -> bool:
    """A cheap check for napari's reader hook: a ``.json`` URL, or a local ``.json`` file whose
    first 4 KiB mention ``stac_version`` (other JSON files are left to other readers)."""
    if not is_stac(source) or isinstance(source, pystac.STACObject):
        return isinstance(source, pystac.STACObject)
    if is_remote(source):
        return True
    try:
        with open(source, "rb") as handle:
            return b'"stac_version"' in handle.read(4096)
    except OSError:
        return False

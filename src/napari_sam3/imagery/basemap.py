"""Basemap tiles as a scene: an XYZ/TMS URL template, a WMS or WMTS endpoint, read by GDAL's WMS
driver over an area of interest.

A basemap covers the world; a run covers an area. :func:`open_basemap` writes, in a folder of
its own, GDAL's description of the service (``service.xml``; for an XYZ template a
``<GDAL_WMS>`` TMS description in EPSG:3857 at one zoom level) and a VRT
(``<name>.basemap.vrt``) that is the service's pixels over the area: the window of the
service's grid that holds the area, snapped outwards to whole pixels, so every pixel is one the
server sent (never resampled here) and the georeferencing is the service's grid exactly. That
VRT is an ordinary raster for the rest of the project (tiling, ``gsd``, the stretch, napari,
QGIS). Its metadata names the service and its attribution (:func:`basemap_metadata`), which
:func:`~napari_sam3.gis.vector.add_provenance` records in every output made from it.

- **Resolution.** An XYZ template is read at ``zoom``, or at the coarsest zoom whose pixels are
  no larger than ``gsd`` (metres of the service's CRS, as ``gsd`` everywhere); a run with
  ``gsd`` then averages those pixels to ``gsd``. A WMS has no pixel size of its own: it needs
  ``gsd``, and the VRT asks the server for pixels of that size. A WMTS or a GDAL description
  file is read at its own finest resolution unless ``gsd`` is given.
- **Tile cache.** Generated descriptions cache tiles in the folder (``<Cache>``, at most
  ``cache_bytes``), removed with it: never in the user's home. A description file given by the
  user is used as it is (its own cache settings).
- **Missing tiles.** Only ``204 No Content`` is an empty tile (transparent: its pixels are
  invalid through the alpha band); a 404 or any other failure fails the read with the tile's
  URL: a tile is never silently replaced by zeros.
- **Network.** Timeouts come from :func:`~napari_sam3.imagery.remote.network_options`; reads of
  a basemap VRT run inside :func:`~napari_sam3.imagery.remote.network_env` (credentials from
  the environment, as for COGs).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import rasterio
from rasterio.crs import CRS
from rasterio.errors import RasterioError
from rasterio.transform import Affine
from rasterio.warp import transform_bounds

from napari_sam3.core.errors import InvalidInput, MissingFile, RunFailed
from napari_sam3.imagery.remote import network_env, network_options

__all__ = [
    "BASEMAP_SUFFIX",
    "CACHE_BYTES",
    "MAX_PIXELS",
    "Basemap",
    "BasemapError",
    "basemap_error",
    "basemap_metadata",
    "basemap_scene",
    "is_basemap",
    "is_basemap_dataset",
    "open_basemap",
    "parse_basemap",
    "xyz_zoom",
]

BASEMAP_SUFFIX = ".basemap.vrt"
CACHE_BYTES = 256 * 2**20
# An area larger than this at the chosen resolution is refused (a lower zoom, a larger gsd).
MAX_PIXELS = 40_000 * 40_000
TILE = 256
PROBE = 8  # pixels a side read at the area's centre before a run
MAX_ZOOM = 24
WEB_MERCATOR = "EPSG:3857"
HALF_WORLD = 20037508.342789244  # metres from the Web Mercator origin to the world's edge
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_XYZ_KEYS = {"z", "x", "y", "-y"}
_CONNECTIONS = ("WMS:", "WMTS:")


class BasemapError(RunFailed, ValueError):
    """A basemap service that could not be read: a wrong template, a server that failed, a
    missing tile (exit 1)."""


@dataclass(frozen=True)
class Basemap:
    """A basemap source as given: ``kind`` is ``xyz`` (a URL template), ``wms``/``wmts`` (a
    GDAL connection string ``WMS:url`` / ``WMTS:url``) or ``gdal`` (a GDAL WMS description
    file, ``<GDAL_WMS>`` or ``<GDAL_WMTS>``)."""

    text: str
    kind: str

    @property
    def name(self) -> str:
        """A file-name-safe name: the host (and port) of the service, or the file's stem."""
        if self.kind == "gdal":
            return Path(self.text).name.split(".")[0] or "basemap"
        url = self.text.split(":", 1)[1] if self.kind in ("wms", "wmts") else self.text
        parts = urlparse(url)
        host = (parts.hostname or "basemap") + (f"_{parts.port}" if parts.port else "")
        return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{host}_{self.kind}")

    @property
    def url(self) -> str:
        """What names the service in provenance and errors (never a credential: those come
        from the environment)."""
        return self.text


def is_basemap(source: Any) -> bool:
    """Whether ``source`` names a basemap service: an http(s) URL template with ``{z}``,
    ``{x}``, ``{y}``, a ``WMS:``/``WMTS:`` connection string, or a GDAL WMS description file."""
    if not isinstance(source, str | os.PathLike):
        return False
    text = os.fspath(source)
    if not isinstance(text, str):
        return False
    if text.upper().startswith(_CONNECTIONS):
        return True
    if text.lower().startswith(("http://", "https://")):
        return bool(_PLACEHOLDER.search(text))
    return text.lower().endswith(".xml") and _description_root(Path(text)) is not None


def is_basemap_dataset(path: Any) -> bool:
    """Whether ``path`` is a VRT :func:`open_basemap` wrote (read inside the network options)."""
    return isinstance(path, str | os.PathLike) and os.fspath(path).endswith(BASEMAP_SUFFIX)


def parse_basemap(source: str) -> Basemap:
    """The :class:`Basemap` of ``source``; InvalidInput naming what is wrong with a template
    (``{z}``, ``{x}`` and ``{y}`` or ``{-y}`` are needed, nothing else between braces)."""
    text = os.fspath(source)
    if text.upper().startswith(_CONNECTIONS):
        kind, _, url = text.partition(":")
        if not url.lower().startswith(("http://", "https://")):
            raise InvalidInput(f"{text}: a {kind.upper()}: connection string names an http(s) URL")
        return Basemap(f"{kind.upper()}:{url}", kind.lower())
    if text.lower().startswith(("http://", "https://")):
        keys = set(_PLACEHOLDER.findall(text))
        unknown = sorted(keys - _XYZ_KEYS)
        if unknown or "z" not in keys or "x" not in keys or not keys & {"y", "-y"}:
            raise InvalidInput(
                f"{text}: an XYZ tile URL names {{z}}, {{x}} and {{y}} (or {{-y}} for TMS rows "
                f"counted from the south), e.g. https://host/tiles/{{z}}/{{x}}/{{y}}.png"
                + (f"; unknown placeholders {unknown}" if unknown else "")
            )
        return Basemap(text, "xyz")
    path = Path(text)
    if not path.is_file():
        raise MissingFile(f"basemap description {text}: no such file")
    if _description_root(path) is None:
        raise InvalidInput(f"{text} is not a GDAL WMS/WMTS description (<GDAL_WMS> or <GDAL_WMTS>)")
    return Basemap(str(path.resolve()), "gdal")


def xyz_zoom(gsd: float) -> int:
    """The coarsest zoom level whose Web Mercator pixels are no larger than ``gsd`` metres."""
    zoom = math.ceil(math.log2(2 * HALF_WORLD / TILE / gsd) - 1e-9)
    return min(max(zoom, 0), MAX_ZOOM)


def xyz_resolution(zoom: int) -> float:
    """Metres of EPSG:3857 per pixel at ``zoom``."""
    return 2 * HALF_WORLD / (TILE * 2**zoom)


def open_basemap(
    source: str | Basemap,
    area: tuple[tuple[float, float, float, float], Any],
    folder: str | os.PathLike,
    *,
    zoom: int | None = None,
    gsd: float | None = None,
    attribution: str | None = None,
    cache_bytes: int = CACHE_BYTES,
) -> Path:
    """Write the VRT of ``source`` over ``area`` (``(bounds, crs)``: minx, miny, maxx, maxy in
    ``crs``) into ``folder`` and return its path. The service is asked for one block there
    first, so a wrong template or a server that fails is a :class:`BasemapError` naming the URL
    now, before a model is run.

    ``attribution`` is recorded with the VRT (default: what the service declares, if anything).
    """
    basemap = source if isinstance(source, Basemap) else parse_basemap(source)
    folder = Path(folder)
    if zoom is not None and basemap.kind != "xyz":
        raise InvalidInput(f"a zoom level chooses the tiles of an XYZ template; {basemap.text} "
                           "is not one: give --gsd METRES instead")  # fmt: skip
    if basemap.kind == "xyz":
        if zoom is None and gsd is None:
            raise InvalidInput(
                f"{basemap.text}: give the zoom level (--zoom Z) or the ground sample "
                "distance (--gsd METRES) that decides which tiles are read"
            )
        zoom = xyz_zoom(gsd) if zoom is None else zoom
        if not 0 <= zoom <= MAX_ZOOM:
            raise InvalidInput(f"zoom {zoom} is not a zoom level (0 .. {MAX_ZOOM})")
        service = folder / "service.xml"
        service.write_text(_tms_description(basemap.text, zoom, folder / "cache", cache_bytes))
        dataset = str(service)
    elif basemap.kind == "wms" and gsd is None:
        raise InvalidInput(
            f"{basemap.text}: a WMS has no pixel size of its own; give --gsd METRES (in the "
            "service's CRS units)"
        )
    else:
        dataset = basemap.text
    crs, transform, size, count, declared = _service_grid(basemap, dataset)
    bounds, area_crs = area
    if bounds[0] > bounds[2]:  # longitudes across the antimeridian (scene/aoi.py's Bbox)
        raise InvalidInput(
            f"the area {bounds} crosses the antimeridian, where a basemap service's grid ends "
            f"(and the map is cut): write each side as its own area, {bounds[0]:g}..180 and "
            f"-180..{bounds[2]:g}, one basemap each"
        )
    try:
        box = transform_bounds(CRS.from_user_input(area_crs), crs, *bounds, densify_pts=21)
    except (RasterioError, ValueError) as error:
        raise InvalidInput(
            f"the area {bounds} ({area_crs}) cannot be placed in {crs}: {error}"
        ) from None
    src = _window(box, transform, size, basemap)
    scale = 1.0
    if gsd is not None and basemap.kind != "xyz":
        if not crs.is_projected:
            raise InvalidInput(
                f"{basemap.text} is served in {crs.to_string()} (degrees): gsd (metres) needs a "
                "projected CRS; ask the service for one (e.g. SRS=EPSG:3857 in the URL)"
            )
        scale = gsd / crs.linear_units_factor[1] / abs(transform.a)
    cols = max(1, round(src[2] / scale))
    rows = max(1, round(src[3] / scale))
    if rows * cols > MAX_PIXELS:
        raise InvalidInput(
            f"the area is {cols} x {rows} pixels at this resolution, more than "
            f"{MAX_PIXELS:.3g}: choose a smaller --bbox or a coarser --zoom/--gsd"
        )
    grid = (
        transform * Affine.translation(src[0], src[1]) * Affine.scale(src[2] / cols, src[3] / rows)
    )
    vrt = folder / f"{basemap.name}{BASEMAP_SUFFIX}"
    vrt.write_text(
        _vrt(dataset, crs, grid, src, (cols, rows), count, basemap, attribution or declared)
    )
    _probe(vrt, basemap)
    return vrt


@contextmanager
def basemap_scene(source: str | Basemap, area, **options: Any):
    """:func:`open_basemap` in a temporary folder (its tile cache too), removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix="napari-sam3-basemap-"))
    try:
        yield open_basemap(source, area, folder, **options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def basemap_metadata(path: Any) -> dict[str, str] | None:
    """``{"service": ..., "attribution": ...}`` of a VRT :func:`open_basemap` wrote; None for
    any other raster."""
    if not is_basemap_dataset(path):
        return None
    try:
        root = ET.parse(os.fspath(path)).getroot()
    except (OSError, ET.ParseError):
        return None
    items = {m.get("key"): m.text or "" for m in root.iterfind("Metadata/MDI")}
    return {"service": items.get("SERVICE", ""), "attribution": items.get("ATTRIBUTION", "")}


def basemap_error(
    path: Any, exc: BaseException, reading: str = "read", service: str | None = None
) -> BasemapError:
    """A clear error for a failed read of a basemap VRT: the service and GDAL's own words (the
    tile URL that failed and its HTTP answer)."""
    messages, seen = [], exc
    while seen is not None and len(messages) < 6:
        messages.append(str(seen).strip())
        seen = seen.__cause__ or seen.__context__
    text = " / ".join(dict.fromkeys(m for m in messages if m and "See previous" not in m))
    text = re.sub(r"\s*Add the HTTP status code to <ZeroBlockHttpCodes>[^.]*\.[^)]*\)\.?", "", text)
    text = re.sub(r"\s+", " ", text)
    service = service or (basemap_metadata(path) or {}).get("service") or os.fspath(path)
    hint = "check the URL template and the area"
    if re.search(r"\b404\b", text):
        hint = (
            "a tile was not found (HTTP 404): check the URL template, the zoom and the area "
            "(a missing tile is never read as empty; only HTTP 204 is)"
        )
    elif re.search(r"\b(401|403)\b", text):
        hint = "refused: give credentials in the environment (GDAL_HTTP_HEADERS, ~/.netrc)"
    elif re.search(r"\b(5\d\d|429)\b|timed out|Timeout", text):
        hint = "the server failed or did not answer in time; retry later"
    return BasemapError(f"cannot {reading} the basemap {service}: {hint} [{text[:400]}]")


# ----------------------------------------------------------------------------- internals


def _description_root(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    match = re.search(r"<(GDAL_WMS|GDAL_WMTS)\b", head)
    return match.group(1) if match else None


def _tms_description(template: str, zoom: int, cache: Path, cache_bytes: int) -> str:
    """GDAL's TMS description of an XYZ template: EPSG:3857, 256 px tiles, rows from the top
    (``{-y}``: from the bottom), at ``zoom`` only (no overviews: a coarser read averages this
    zoom's pixels, never another zoom's)."""
    url = template.replace("{z}", "${z}").replace("{x}", "${x}")
    flipped = "{-y}" in template
    url = url.replace("{-y}", "${y}").replace("{y}", "${y}")
    root = ET.Element("GDAL_WMS")
    service = ET.SubElement(root, "Service", name="TMS")
    ET.SubElement(service, "ServerUrl").text = url
    window = ET.SubElement(root, "DataWindow")
    for key, value in (
        ("UpperLeftX", -HALF_WORLD),
        ("UpperLeftY", HALF_WORLD),
        ("LowerRightX", HALF_WORLD),
        ("LowerRightY", -HALF_WORLD),
        ("TileLevel", zoom),
        ("TileCountX", 1),
        ("TileCountY", 1),
        ("YOrigin", "bottom" if flipped else "top"),
    ):
        ET.SubElement(window, key).text = str(value)
    for key, value in (
        ("Projection", WEB_MERCATOR),
        ("BlockSizeX", TILE),
        ("BlockSizeY", TILE),
        ("BandsCount", 4),  # RGBA: a JPEG tile gets an opaque alpha, an empty one a clear one
        ("OverviewCount", 0),
        ("MaxConnections", 4),
        ("Timeout", network_options()["GDAL_HTTP_TIMEOUT"]),
        ("ZeroBlockHttpCodes", 204),
        ("ZeroBlockOnServerException", "false"),
    ):
        ET.SubElement(root, key).text = str(value)
    cached = ET.SubElement(root, "Cache")
    ET.SubElement(cached, "Path").text = str(cache)
    ET.SubElement(cached, "MaxSize").text = str(int(cache_bytes))
    return ET.tostring(root, encoding="unicode")


def _service_grid(basemap: Basemap, dataset: str):
    """(CRS, transform, (cols, rows), band count, declared attribution) of the service."""
    try:
        with network_env(), rasterio.open(dataset) as ds:
            if ds.crs is None:
                raise InvalidInput(f"{basemap.text} declares no CRS; it cannot be placed")
            tags = {k.lower(): v for k, v in ds.tags().items()}
            declared = next(
                (v for k, v in tags.items() if "attribution" in k or k == "copyright"), ""
            )
            return ds.crs, ds.transform, (ds.width, ds.height), ds.count, declared
    except RasterioError as error:
        raise basemap_error(dataset, error, "open", basemap.text) from None


def _window(box, transform: Affine, size: tuple[int, int], basemap: Basemap):
    """(col, row, width, height): the service's pixels that hold ``box``, whole pixels."""
    inverse = ~transform
    xs, ys = zip(*(inverse * (x, y) for x in box[::2] for y in box[1::2]), strict=True)
    c0 = max(math.floor(min(xs) + 1e-6), 0)
    r0 = max(math.floor(min(ys) + 1e-6), 0)
    c1 = min(math.ceil(max(xs) - 1e-6), size[0])
    r1 = min(math.ceil(max(ys) - 1e-6), size[1])
    if c0 >= c1 or r0 >= r1:
        raise InvalidInput(f"the area lies outside what {basemap.text} covers")
    return c0, r0, c1 - c0, r1 - r0


_INTERP = {1: ["Gray"], 2: ["Gray", "Alpha"], 3: ["Red", "Green", "Blue"]}


def _vrt(dataset, crs, grid, src, size, count, basemap: Basemap, attribution: str) -> str:
    cols, rows = size
    root = ET.Element("VRTDataset", rasterXSize=str(cols), rasterYSize=str(rows))
    ET.SubElement(root, "SRS").text = crs.to_wkt()
    ET.SubElement(root, "GeoTransform").text = ", ".join(
        repr(float(v)) for v in (grid.c, grid.a, grid.b, grid.f, grid.d, grid.e)
    )
    meta = ET.SubElement(root, "Metadata")
    ET.SubElement(meta, "MDI", key="SERVICE").text = basemap.url
    ET.SubElement(meta, "MDI", key="ATTRIBUTION").text = attribution or ""
    interp = _INTERP.get(count, ["Red", "Green", "Blue", "Alpha"])
    local = os.path.isfile(dataset)
    for band in range(1, count + 1):
        node = ET.SubElement(root, "VRTRasterBand", dataType="Byte", band=str(band))
        if band <= len(interp):
            ET.SubElement(node, "ColorInterp").text = interp[band - 1]
        simple = ET.SubElement(node, "SimpleSource")
        ET.SubElement(simple, "SourceFilename", relativeToVRT="0").text = (
            str(Path(dataset).resolve()) if local else dataset
        )
        ET.SubElement(simple, "SourceBand").text = str(band)
        ET.SubElement(simple, "SrcRect", xOff=str(src[0]), yOff=str(src[1]), xSize=str(src[2]),
                      ySize=str(src[3]))  # fmt: skip
        ET.SubElement(simple, "DstRect", xOff="0", yOff="0", xSize=str(cols), ySize=str(rows))
    return ET.tostring(root, encoding="unicode")


def _probe(vrt: Path, basemap: Basemap) -> None:
    """Read a few pixels at the area's centre (one tile, mostly): a wrong template fails here,
    naming the URL, before a model is loaded."""
    try:
        with network_env(), rasterio.open(vrt) as ds:
            size = min(PROBE, ds.width), min(PROBE, ds.height)
            col, row = (ds.width - size[0]) // 2, (ds.height - size[1]) // 2
            ds.read(1, window=rasterio.windows.Window(col, row, *size))
    except RasterioError as error:
        raise basemap_error(vrt, error, "read the tile at the area's centre of") from None

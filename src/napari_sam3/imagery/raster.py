"""Read rasters (GeoTIFF, JPEG 2000, PNG, JPEG) into bands-first arrays with their georeferencing.

Conventions:

- Band indices are **1-based**, as in rasterio and GDAL; bands may also be chosen by name.
- A ``window`` is either a :class:`rasterio.windows.Window` (integer offsets and sizes, lying inside
  the raster) or a pair of Python slices ``(rows, cols)`` with numpy semantics, e.g.
  ``np.s_[100:612, 200:712]``: stops past the edge are clamped, like slicing an array.
- ``max_size`` reads a decimated overview (nearest neighbour, so no value is invented) whose longest
  side is at most ``max_size``; the returned transform describes the decimated grid.
- Several single-band files (Sentinel-2 ships one JPEG 2000 per band) are stacked by passing a list
  of paths; they must share shape, CRS, transform and dtype.
- A path may be an ``http(s)://`` URL (a Cloud-Optimised GeoTIFF on a server): it is read with
  range requests, only the blocks a read needs (:mod:`napari_sam3.imagery.remote`).
- ``gsd`` (metres) reads on a resampled grid whose pixels cover ``gsd`` metres on the ground
  (:func:`ground_grid`): ``raster_info`` describes that grid and ``window`` is in its pixels.
  Coarser than the raster: area average; finer: bilinear.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
import rasterio.vrt
from rasterio.crs import CRS
from rasterio.enums import ColorInterp, MaskFlags, Resampling
from rasterio.errors import NotGeoreferencedWarning, RasterioError
from rasterio.transform import Affine
from rasterio.windows import Window

from napari_sam3.core import validate
from napari_sam3.core.errors import BadData, InvalidInput, MissingFile
from napari_sam3.imagery.bands import BandKey, resolve_bands
from napari_sam3.imagery.basemap import basemap_error, is_basemap_dataset
from napari_sam3.imagery.remote import (
    file_name,
    is_remote,
    network_env,
    remote_driver,
    retried,
)

PathLike = str | os.PathLike[str]
WindowLike = Window | tuple[slice, slice]
Source = Path | str  # a local file, or a URL kept as given
# Upsampling beyond this invents pixels without adding anything the model could use.
MAX_UPSAMPLING = 16
_OPEN_LOCK = threading.Lock()  # warnings.catch_warnings is not thread-safe

# Sentinel-2 product file names end in the band id: T33UUU_20170216T102101_B8A.jp2, ..._B04_10m.jp2
_S2_BAND = re.compile(r"(?:^|_)(B(?:0[1-9]|1[0-2]|8A))(?:_\d+m)?$", re.IGNORECASE)


@dataclass(frozen=True)
class RasterInfo:
    """What a raster holds, read from its header only (no pixels)."""

    path: Source | tuple[Source, ...]
    shape: tuple[int, int, int]  # (bands, rows, cols)
    dtype: np.dtype
    crs: CRS | None
    transform: Affine
    nodata: float | None
    band_names: tuple[str, ...]
    # GDAL's colour interpretation of each band ("red", "alpha", "gray", "undefined" ...)
    roles: tuple[str, ...] = ()
    # GDAL's dataset mask marks pixels invalid (an alpha band, a mask band, a warped footprint)
    masked: bool = False
    # how the pixels were placed when the file has no geotransform of its own ("" otherwise)
    placement: str = ""

    @property
    def count(self) -> int:
        return self.shape[0]

    @property
    def rows(self) -> int:
        return self.shape[1]

    @property
    def cols(self) -> int:
        return self.shape[2]


@dataclass(frozen=True, eq=False)
class Raster:
    """Pixels ``data`` (bands, rows, cols) plus the georeferencing of exactly those pixels.

    ``path`` is the file read, or the tuple of files for a stack of single-band files.
    ``transform`` maps (col, row) of ``data`` to CRS coordinates, so it is the window's transform
    for a windowed read and the decimated grid's for a ``max_size`` read.
    """

    data: np.ndarray
    crs: CRS | None
    transform: Affine
    nodata: float | None
    band_names: tuple[str, ...]
    path: Source | tuple[Source, ...]
    # GDAL's dataset mask of these pixels (True = valid), None when it marks none invalid;
    # napari_sam3.imagery.validity adds nodata, fill and NaN to it
    valid: np.ndarray | None = None
    roles: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.data.shape  # type: ignore[return-value]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def band_index(self, band: BandKey) -> int:
        """1-based index of ``band`` (a 1-based index or a band name) in ``data``."""
        return _resolve_bands([band], self.band_names, _describe_path(self.path))[0]


def raster_info(path: PathLike | Sequence[PathLike], *, gsd: float | None = None) -> RasterInfo:
    """Shape, CRS, transform, dtype, nodata and band names of a file (or a stack) without its
    pixels; with ``gsd``, of the resampled grid (:func:`ground_grid`)."""
    info = _inspect(path)[0]
    if gsd is None:
        return info
    transform, rows, cols, _, _ = ground_grid(info, gsd)
    return dataclasses.replace(info, shape=(info.count, rows, cols), transform=transform)


def pixel_metres(info: RasterInfo) -> float:
    """Metres on the ground across one pixel of ``info``'s grid (its true size where the
    transform is rotated); NaN where the CRS is missing or not projected."""
    if info.crs is None or not info.crs.is_projected:
        return float("nan")
    t = info.transform
    return math.hypot(t.a, t.d) * info.crs.linear_units_factor[1]


def ground_grid(info: RasterInfo, gsd: float) -> tuple[Affine, int, int, float, float]:
    """The grid whose square pixels cover ``gsd`` metres on the ground, over the raster's extent:
    (transform, rows, cols, native pixels per grid pixel down, across).

    It starts at the raster's top-left corner, in the raster's CRS, so its georeferencing is
    exact; it covers the raster but for a sliver narrower than one grid pixel at the right and
    bottom edges. ``gsd`` is in metres whatever the CRS's linear unit (feet are converted).
    """
    label = _describe_path(info.path)
    if isinstance(gsd, bool) or not isinstance(gsd, int | float | np.integer | np.floating):
        raise InvalidInput(f"gsd must be a number of metres such as 10, got {gsd!r}")
    if not math.isfinite(gsd) or gsd <= 0:
        raise InvalidInput(f"gsd must be a positive number of metres, got {gsd!r}")
    if info.crs is None:
        raise InvalidInput(
            f"{label} has no CRS, so its pixels have no size on the ground: gsd needs a "
            "georeferenced raster (or leave gsd out to use its pixels as they are)"
        )
    if not info.crs.is_projected:
        raise InvalidInput(
            f"{label} is in {info.crs.to_string()}, whose units are degrees: gsd (metres) needs "
            "a projected CRS; reproject the raster (e.g. gdalwarp -t_srs EPSG:326XX) first"
        )
    t = info.transform
    if t.b != 0 or t.d != 0:
        raise InvalidInput(f"{label} is rotated or sheared; gsd needs a north-up raster")
    _, metres = info.crs.linear_units_factor
    step = float(gsd) / metres  # in CRS units
    across, down = step / abs(t.a), step / abs(t.e)
    if min(across, down) < 1 / MAX_UPSAMPLING:
        raise InvalidInput(
            f"gsd {gsd:g} m would upsample {label} ({abs(t.a) * metres:g} m pixels) more than "
            f"{MAX_UPSAMPLING} times; use a gsd of at least {abs(t.a) * metres / MAX_UPSAMPLING:g} m"
        )
    rows = math.floor(info.rows / down + 1e-9)
    cols = math.floor(info.cols / across + 1e-9)
    if rows < 1 or cols < 1:
        raise InvalidInput(
            f"gsd {gsd:g} m is coarser than {label} itself ({info.rows} x {info.cols} pixels of "
            f"{abs(t.a) * metres:g} m); use a smaller gsd"
        )
    transform = t @ Affine.scale(across, down)
    return transform, rows, cols, down, across


def read_raster(
    path: PathLike | Sequence[PathLike],
    bands: Sequence[BandKey] | BandKey | None = None,
    window: WindowLike | None = None,
    *,
    max_size: int | None = None,
    gsd: float | None = None,
) -> Raster:
    """Read a raster file, or stack several single-band files, into a :class:`Raster`.

    Args:
        path: a GeoTIFF, JPEG 2000, PNG or JPEG file, or a list of files to stack band after band.
        bands: 1-based band indices and/or band names (default: all bands, in file order).
        window: the part to read, a rasterio ``Window`` or ``(row_slice, col_slice)``; default whole.
        max_size: if given, read a nearest-neighbour decimated grid whose longest side is at most
            this many pixels (fast on JPEG 2000 and on GeoTIFFs with overviews).
        gsd: read the grid of :func:`ground_grid` (pixels of ``gsd`` metres); ``window`` is in
            its pixels.

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: a file is not a readable raster, the files of a stack do not match, or
            ``bands``/``window``/``max_size``/``gsd`` do not fit the raster (a URL that cannot be
            read: :class:`~napari_sam3.imagery.remote.RemoteRasterError`, a ValueError).
    """
    info, headers = _inspect(path)
    label = _describe_path(info.path)
    wanted = _resolve_bands(_as_list(bands), info.band_names, label)
    resampling = Resampling.nearest
    grid, (down, across) = info.transform, (1.0, 1.0)
    rows, cols = info.rows, info.cols
    if gsd is not None:
        grid, rows, cols, down, across = ground_grid(info, gsd)
        resampling = Resampling.average if min(down, across) > 1 else Resampling.bilinear
    win = _to_window(window, rows, cols, label)
    out_rows, out_cols = _decimated_shape(win, max_size)
    source = Window(
        win.col_off * across,
        win.row_off * down,
        min(win.width * across, info.cols - win.col_off * across),
        min(win.height * down, info.rows - win.row_off * down),
    )

    # Map each wanted stack band to (file, band-in-file); read each file once.
    per_file = [h.count for h in headers]
    owners: list[tuple[int, int]] = []
    for index in wanted:
        offset = index - 1
        for f, count in enumerate(per_file):
            if offset < count:
                owners.append((f, offset + 1))
                break
            offset -= count
    data = np.empty((len(wanted), out_rows, out_cols), dtype=info.dtype)
    valid = None
    for f, header in enumerate(headers):
        slots = [i for i, (owner, _) in enumerate(owners) if owner == f]
        if header.masked:
            mask = _read_mask(header.path, source, (out_rows, out_cols))
            valid = mask if valid is None else valid & mask
        if not slots:
            continue
        indexes = [owners[i][1] for i in slots]
        if header.palette is not None:
            indices = _read_pixels(header.path, [1], source, (out_rows, out_cols))[0]
            colours = header.palette[np.minimum(indices, len(header.palette) - 1)]
            data[slots] = np.moveaxis(colours[..., :3], -1, 0)[[i - 1 for i in indexes]]
            opaque = colours[..., 3] > 0
            if not opaque.all():
                valid = opaque if valid is None else valid & opaque
            continue
        data[slots] = _read_pixels(header.path, indexes, source, (out_rows, out_cols), resampling)
    if valid is not None and valid.all():
        valid = None

    transform = (grid @ Affine.translation(win.col_off, win.row_off)) @ Affine.scale(
        win.width / out_cols, win.height / out_rows
    )
    return Raster(
        data=data,
        crs=info.crs,
        transform=transform,
        nodata=info.nodata,
        band_names=tuple(info.band_names[i - 1] for i in wanted),
        path=info.path,
        valid=valid,
        roles=tuple(info.roles[i - 1] for i in wanted) if info.roles else (),
    )


# ----------------------------------------------------------------------------- internals


@dataclass(frozen=True)
class _Header:
    path: Source
    count: int
    rows: int
    cols: int
    dtype: np.dtype
    crs: CRS | None
    transform: Affine
    nodata: float | None
    names: tuple[str, ...]
    roles: tuple[str, ...]
    masked: bool
    palette: np.ndarray | None  # (entries, 4) uint8 RGBA of a paletted band, expanded on read
    placement: str


def _inspect(path: PathLike | Sequence[PathLike]) -> tuple[RasterInfo, list[_Header]]:
    sources = _sources(path)
    headers = [_header(p) for p in sources]
    _check_stackable(headers)
    names = _stack_names(headers)
    first = headers[0]
    info = RasterInfo(
        path=sources[0] if isinstance(path, str | os.PathLike) else tuple(sources),
        shape=(len(names), first.rows, first.cols),
        dtype=first.dtype,
        crs=first.crs,
        transform=first.transform,
        nodata=first.nodata,
        band_names=names,
        roles=tuple(r for h in headers for r in h.roles),
        masked=any(h.masked for h in headers),
        placement=first.placement,
    )
    return info, headers


def _sources(path: PathLike | Sequence[PathLike]) -> list[Source]:
    if isinstance(path, str | os.PathLike):
        items = [path]
    elif isinstance(path, Sequence):
        items = list(path)
        if not items:
            raise InvalidInput("read_raster got an empty list of files; pass at least one path.")
    else:
        raise InvalidInput(
            f"expected a file path or a list of paths, got {type(path).__name__}; "
            "pass e.g. 'scene.tif' or ['B04.jp2', 'B03.jp2', 'B02.jp2']."
        )
    sources = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise InvalidInput(f"expected a file path, got {type(item).__name__}: {item!r}.")
        text = os.fspath(item)
        if is_remote(text):
            sources.append(text)  # a URL stays as given (Path would fold its "//")
            continue
        p = Path(item)
        if "://" not in text and not text.startswith("/vsi") and not p.exists():
            raise MissingFile(f"raster file not found: {text}")
        sources.append(p)
    return sources


@contextmanager
def open_dataset(
    path: Source, overview_level: int | None = None
) -> Iterator[rasterio.io.DatasetReader]:
    """``rasterio.open`` for every read of a raster: a URL opens inside
    :func:`~napari_sam3.imagery.remote.network_env` (held for the block, so its reads use it too)
    with one driver only, and within :func:`keep_remote_open` is opened once; plain PNG/JPEG
    files open without a georeferencing warning."""
    remote = is_remote(path)
    kwargs: dict = {} if overview_level is None else {"overview_level": overview_level}
    with contextlib.ExitStack() as stack:
        if remote:
            stack.enter_context(network_env())
            kwargs["driver"] = remote_driver(os.fspath(path))
            pooled = _pooled(stack, (os.fspath(path), overview_level), kwargs)
            if pooled is not None:
                yield _placed(stack, pooled, path)
                return
        elif is_basemap_dataset(path):  # a VRT of a tile service: its reads go over the network
            stack.enter_context(network_env())
        with _OPEN_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            ds = stack.enter_context(rasterio.open(path, **kwargs))
        yield _placed(stack, ds, path)


def _placed(stack: contextlib.ExitStack, ds, path: Source):
    """``ds`` itself, or, for a file placed by ground control points only, GDAL's warp of it to
    a north-up grid in the GCPs' CRS (as ``gdalwarp`` would), with an alpha band that marks
    the outside of the footprint. Files placed by RPCs only are refused: they need a DEM."""
    if not ds.transform.is_identity or ds.crs is not None:
        return ds
    gcps, gcp_crs = ds.gcps
    if gcps:
        if gcp_crs is None:
            raise InvalidInput(
                f"{file_name(path)} has {len(gcps)} ground control points but no CRS for them, "
                "so it cannot be placed; assign one with gdal_translate -a_srs EPSG:XXXX, or warp "
                "it yourself (gdalwarp -t_srs EPSG:XXXX in.tif out.tif)"
            )
        from rasterio.vrt import WarpedVRT

        return stack.enter_context(
            WarpedVRT(
                ds, src_crs=gcp_crs, crs=gcp_crs, add_alpha=True, resampling=Resampling.bilinear
            )
        )
    if ds.rpcs is not None:
        raise InvalidInput(
            f"{file_name(path)} is placed by rational polynomial coefficients (RPCs) only, which "
            "need a terrain model to be placed right; orthorectify it first, e.g. "
            "gdalwarp -rpc -to RPC_DEM=dem.tif -t_srs EPSG:XXXX in.tif out.tif"
        )
    return ds


@contextmanager
def keep_remote_open() -> Iterator[None]:
    """Within the block, each remote raster is opened once and its handle reused (one reader at
    a time): GDAL's block cache then serves the blocks that overlapping tiles and the scene's
    statistics share, instead of fetching them again. Closed when the outermost block ends."""
    global _pool_depth, _pool
    with _POOL_LOCK:
        _pool_depth += 1
        _pool = {} if _pool is None else _pool
    try:
        yield
    finally:
        with _POOL_LOCK:
            _pool_depth -= 1
            if _pool_depth == 0:
                pool, _pool = _pool or {}, None
                for ds, lock in pool.values():
                    with lock:
                        ds.close()


_POOL_LOCK = threading.Lock()
_pool_depth = 0
_pool: dict[tuple[str, int | None], tuple[rasterio.io.DatasetReader, threading.Lock]] | None = None


def _drop_pooled(url: str) -> None:
    """Close the pooled handles of ``url`` (after a failed read): the next use opens it again."""
    with _POOL_LOCK:
        entries = [entry for key, entry in (_pool or {}).items() if key[0] == url]
    for ds, lock in entries:
        if ds is not None:
            with lock:
                ds.close()


def _pooled(stack: contextlib.ExitStack, key, kwargs) -> rasterio.io.DatasetReader | None:
    """The pooled handle of ``key`` (opened now if need be), held by ``stack``; None outside a
    :func:`keep_remote_open` block."""
    with _POOL_LOCK:
        if _pool is None:
            return None
        entry = _pool.get(key)
        if entry is None:
            entry = _pool[key] = (None, threading.Lock())
    ds, lock = entry
    stack.enter_context(lock)
    if ds is None or ds.closed:
        with _OPEN_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            ds = rasterio.open(key[0], **kwargs)
        with _POOL_LOCK:
            if _pool is not None:
                _pool[key] = (ds, lock)
            else:  # the block ended meanwhile: nobody else will close it
                stack.callback(ds.close)
    return ds


def _header(path: Source) -> _Header:
    try:
        return _reading(path, lambda: _read_header(path))
    except RasterioError as exc:
        raise BadData(
            f"cannot read {path} as a raster (GeoTIFF, JPEG 2000, PNG, JPEG): {exc}"
        ) from exc


def _read_header(path: Source) -> _Header:
    with open_dataset(path) as ds:
        nodatas = {v for v in ds.nodatavals if v is not None}
        if len(nodatas) > 1:
            raise InvalidInput(
                f"{path.name}: bands have different nodata values {sorted(nodatas)}; "
                "read them separately and pass nodata= explicitly when stretching."
            )
        if len(set(ds.dtypes)) > 1:
            raise InvalidInput(
                f"{path.name}: bands have different dtypes {ds.dtypes}; read them separately."
            )
        palette = _palette(ds)
        count = 3 if palette is not None else ds.count
        return _Header(
            path=path,
            count=count,
            rows=ds.height,
            cols=ds.width,
            dtype=np.dtype(np.uint8 if palette is not None else ds.dtypes[0]),
            crs=ds.crs,
            transform=ds.transform,
            nodata=nodatas.pop() if nodatas else None,
            names=("red", "green", "blue")
            if palette is not None
            else _band_names(path, ds.descriptions),
            roles=("red", "green", "blue")
            if palette is not None
            else tuple(c.name for c in ds.colorinterp),
            masked=_has_mask(ds),
            palette=palette,
            placement=_placement(ds),
        )


def _reading(path: Source, action, reading: str = "open"):
    """``action()``, which opens ``path`` and reads it; a URL's failures are tried again once
    and named (:func:`~napari_sam3.imagery.remote.retried`), its pooled handle dropped first; a
    basemap's failures name the service and the tile (:func:`~napari_sam3.imagery.basemap.basemap_error`)."""
    if is_basemap_dataset(path):
        try:
            return action()
        except RasterioError as exc:
            raise basemap_error(path, exc, reading) from None
    if not is_remote(path):
        return action()
    url = os.fspath(path)
    return retried(url, action, reading, discard=lambda: _drop_pooled(url))


def _has_mask(ds) -> bool:
    """GDAL's dataset mask marks pixels by more than nodata (alpha, a mask band, a warp)."""
    marking = {MaskFlags.per_dataset, MaskFlags.alpha}
    return any(marking & set(flags) for flags in ds.mask_flag_enums)


def _palette(ds) -> np.ndarray | None:
    """A single paletted band's colour table as an (entries, 4) uint8 lookup table."""
    if ds.count != 1 or ds.colorinterp[0] != ColorInterp.palette:
        return None
    try:
        table = ds.colormap(1)
    except ValueError:  # a palette interpretation without a table: grey indices
        return None
    size = int(min(max(table) + 1, 1 << 16)) if table else 0
    if size == 0:
        return None
    lut = np.zeros((max(size, 256 if ds.dtypes[0] == "uint8" else size), 4), dtype=np.uint8)
    for index, colour in table.items():
        if 0 <= index < len(lut):
            lut[index] = colour
    return lut


def _placement(ds) -> str:
    if isinstance(ds, rasterio.vrt.WarpedVRT):
        gcps, crs = ds.src_dataset.gcps
        return f"warped to a north-up grid from {len(gcps)} ground control points ({crs})"
    return ""


def _read_mask(path: Source, win: Window, out_shape: tuple[int, int]) -> np.ndarray:
    """GDAL's dataset mask of a window, True where valid."""

    def read() -> np.ndarray:
        with open_dataset(path) as ds:
            return ds.dataset_mask(window=win, out_shape=out_shape) > 0

    try:
        return _reading(path, read, "read the mask of")
    except RasterioError as exc:
        raise BadData(f"cannot read the mask of {path} (damaged file?): {exc}") from exc


def _stem(path: Source) -> str:
    return Path(file_name(path)).stem


def _band_names(path: Source, descriptions: Sequence[str | None]) -> tuple[str, ...]:
    names = [d.strip() if d and d.strip() else None for d in descriptions]
    if len(names) == 1 and names[0] is None:
        match = _S2_BAND.search(_stem(path))
        if match:
            names[0] = match.group(1).upper()
    names = [n if n is not None else f"band_{i}" for i, n in enumerate(names, start=1)]
    return tuple(names)


def _stack_names(headers: list[_Header]) -> tuple[str, ...]:
    names = [n for h in headers for n in h.names]
    if len(headers) > 1 and len(set(names)) < len(names):
        # Same names in different files (e.g. band_1 twice): qualify them with the file stem.
        names = [f"{_stem(h.path)}:{n}" for h in headers for n in h.names]
    return tuple(names)


def _check_stackable(headers: list[_Header]) -> None:
    first = headers[0]
    for h in headers[1:]:
        problems = []
        if (h.rows, h.cols) != (first.rows, first.cols):
            problems.append(f"shape {h.rows}x{h.cols} vs {first.rows}x{first.cols}")
        if h.crs != first.crs:
            problems.append(f"CRS {h.crs} vs {first.crs}")
        if not h.transform.almost_equals(first.transform):
            problems.append(f"transform {tuple(h.transform)[:6]} vs {tuple(first.transform)[:6]}")
        if h.dtype != first.dtype:
            problems.append(f"dtype {h.dtype} vs {first.dtype}")
        if h.nodata != first.nodata and not (_isnan(h.nodata) and _isnan(first.nodata)):
            problems.append(f"nodata {h.nodata} vs {first.nodata}")
        if problems:
            raise InvalidInput(
                f"cannot stack {file_name(h.path)} onto {file_name(first.path)}: "
                + "; ".join(problems)
                + ". Stack only bands on the same grid (resample first, e.g. 20 m bands to 10 m)."
            )


def _isnan(value: float | None) -> bool:
    return value is not None and math.isnan(value)


def _describe_path(path: Source | tuple[Source, ...]) -> str:
    if isinstance(path, tuple):
        return "[" + ", ".join(file_name(p) for p in path) + "]"
    return file_name(path)


def _as_list(bands: Sequence[BandKey] | BandKey | None) -> list[BandKey] | None:
    if bands is None:
        return None
    if isinstance(bands, str | int | np.integer):
        return [bands]  # type: ignore[list-item]
    return list(bands)


def _resolve_bands(bands: Sequence[BandKey] | None, names: Sequence[str], label: str) -> list[int]:
    """1-based indices for ``bands`` (the rule of :mod:`napari_sam3.imagery.bands`) among ``names``."""
    count = len(names)
    if bands is None:
        return list(range(1, count + 1))
    if len(bands) == 0:
        raise InvalidInput(f"bands=[] selects nothing from {label}; pass band indices or names.")
    return [i + 1 for i in resolve_bands(bands, count, names, label)]


def _to_window(window: WindowLike | None, rows: int, cols: int, label: str) -> Window:
    if window is None:
        return Window(0, 0, cols, rows)
    if isinstance(window, Window):
        values = (window.col_off, window.row_off, window.width, window.height)
        if any(float(v) != int(v) for v in values):
            raise InvalidInput(
                f"window {window} has fractional offsets or sizes; use whole pixels "
                "(e.g. window.round_offsets().round_lengths())."
            )
        c0, r0, w, h = (int(v) for v in values)
        if w <= 0 or h <= 0 or r0 < 0 or c0 < 0 or r0 + h > rows or c0 + w > cols:
            raise InvalidInput(
                f"window {window} does not lie inside {label} ({rows} rows x {cols} cols); "
                "use window.intersection(Window(0, 0, cols, rows)) or numpy-style slices."
            )
        return Window(c0, r0, w, h)
    if isinstance(window, tuple) and len(window) == 2 and all(isinstance(s, slice) for s in window):
        row_slice, col_slice = window
        r0, r1, rstep = row_slice.indices(rows)
        c0, c1, cstep = col_slice.indices(cols)
        if rstep != 1 or cstep != 1:
            raise InvalidInput(
                f"window slices must have step 1, got {window}; use max_size= for a decimated read."
            )
        if r1 <= r0 or c1 <= c0:
            raise InvalidInput(
                f"window {window} selects no pixels of {label} ({rows} rows x {cols} cols)."
            )
        return Window(c0, r0, c1 - c0, r1 - r0)
    raise InvalidInput(
        f"window must be a rasterio Window or a (row_slice, col_slice) pair such as "
        f"np.s_[0:512, 0:512], got {window!r}."
    )


def _decimated_shape(win: Window, max_size: int | None) -> tuple[int, int]:
    rows, cols = int(win.height), int(win.width)
    if max_size is None:
        return rows, cols
    max_size = validate.positive_int("max_size", max_size)
    longest = max(rows, cols)
    if longest <= max_size:
        return rows, cols
    factor = max_size / longest
    return max(1, round(rows * factor)), max(1, round(cols * factor))


def _read_pixels(
    path: Source,
    indexes: list[int],
    win: Window,
    out_shape: tuple[int, int],
    resampling: Resampling = Resampling.nearest,
) -> np.ndarray:

    def read() -> np.ndarray:
        with open_dataset(path) as ds:
            return ds.read(
                indexes,
                window=win,
                out_shape=(len(indexes), *out_shape),
                resampling=resampling,
            )

    try:
        return _reading(path, read, "read the pixels of")
    except RasterioError as exc:
        raise BadData(
            f"cannot read the pixels of {path} (damaged or truncated file?): {exc}"
        ) from exc

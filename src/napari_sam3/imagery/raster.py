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
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.errors import NotGeoreferencedWarning, RasterioError
from rasterio.transform import Affine
from rasterio.windows import Window

from napari_sam3.core import validate
from napari_sam3.imagery.bands import BandKey, resolve_bands

PathLike = str | os.PathLike[str]
WindowLike = Window | tuple[slice, slice]

# Sentinel-2 product file names end in the band id: T33UUU_20170216T102101_B8A.jp2, ..._B04_10m.jp2
_S2_BAND = re.compile(r"(?:^|_)(B(?:0[1-9]|1[0-2]|8A))(?:_\d+m)?$", re.IGNORECASE)


@dataclass(frozen=True)
class RasterInfo:
    """What a raster holds, read from its header only (no pixels)."""

    path: Path | tuple[Path, ...]
    shape: tuple[int, int, int]  # (bands, rows, cols)
    dtype: np.dtype
    crs: CRS | None
    transform: Affine
    nodata: float | None
    band_names: tuple[str, ...]

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
    path: Path | tuple[Path, ...]

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.data.shape  # type: ignore[return-value]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def band_index(self, band: BandKey) -> int:
        """1-based index of ``band`` (a 1-based index or a band name) in ``data``."""
        return _resolve_bands([band], self.band_names, _describe_path(self.path))[0]


def raster_info(path: PathLike | Sequence[PathLike]) -> RasterInfo:
    """Shape, CRS, transform, dtype, nodata and band names of a file (or a stack) without its pixels."""
    return _inspect(path)[0]


def read_raster(
    path: PathLike | Sequence[PathLike],
    bands: Sequence[BandKey] | BandKey | None = None,
    window: WindowLike | None = None,
    *,
    max_size: int | None = None,
) -> Raster:
    """Read a raster file, or stack several single-band files, into a :class:`Raster`.

    Args:
        path: a GeoTIFF, JPEG 2000, PNG or JPEG file, or a list of files to stack band after band.
        bands: 1-based band indices and/or band names (default: all bands, in file order).
        window: the part to read, a rasterio ``Window`` or ``(row_slice, col_slice)``; default whole.
        max_size: if given, read a nearest-neighbour decimated grid whose longest side is at most
            this many pixels (fast on JPEG 2000 and on GeoTIFFs with overviews).

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: a file is not a readable raster, the files of a stack do not match, or
            ``bands``/``window``/``max_size`` do not fit the raster.
    """
    info, headers = _inspect(path)
    label = _describe_path(info.path)
    wanted = _resolve_bands(_as_list(bands), info.band_names, label)
    win = _to_window(window, info.rows, info.cols, label)
    out_rows, out_cols = _decimated_shape(win, max_size)

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
    for f, header in enumerate(headers):
        slots = [i for i, (owner, _) in enumerate(owners) if owner == f]
        if not slots:
            continue
        indexes = [owners[i][1] for i in slots]
        data[slots] = _read_pixels(header.path, indexes, win, (out_rows, out_cols))

    transform = (info.transform @ Affine.translation(win.col_off, win.row_off)) @ Affine.scale(
        win.width / out_cols, win.height / out_rows
    )
    return Raster(
        data=data,
        crs=info.crs,
        transform=transform,
        nodata=info.nodata,
        band_names=tuple(info.band_names[i - 1] for i in wanted),
        path=info.path,
    )


# ----------------------------------------------------------------------------- internals


@dataclass(frozen=True)
class _Header:
    path: Path
    count: int
    rows: int
    cols: int
    dtype: np.dtype
    crs: CRS | None
    transform: Affine
    nodata: float | None
    names: tuple[str, ...]


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
    )
    return info, headers


def _sources(path: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(path, str | os.PathLike):
        items = [path]
    elif isinstance(path, Sequence):
        items = list(path)
        if not items:
            raise ValueError("read_raster got an empty list of files; pass at least one path.")
    else:
        raise ValueError(
            f"expected a file path or a list of paths, got {type(path).__name__}; "
            "pass e.g. 'scene.tif' or ['B04.jp2', 'B03.jp2', 'B02.jp2']."
        )
    sources = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise ValueError(f"expected a file path, got {type(item).__name__}: {item!r}.")
        p = Path(item)
        text = os.fspath(item)
        remote = "://" in text or text.startswith("/vsi")
        if not remote and not p.exists():
            raise FileNotFoundError(f"raster file not found: {text}")
        sources.append(p)
    return sources


@contextmanager
def _open(path: Path) -> Iterator[rasterio.io.DatasetReader]:
    # Plain PNG/JPEG files have no georeferencing: crs None and the identity transform, silently.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(path) as ds:
            yield ds


def _header(path: Path) -> _Header:
    try:
        with _open(path) as ds:
            nodatas = {v for v in ds.nodatavals if v is not None}
            if len(nodatas) > 1:
                raise ValueError(
                    f"{path.name}: bands have different nodata values {sorted(nodatas)}; "
                    "read them separately and pass nodata= explicitly when stretching."
                )
            if len(set(ds.dtypes)) > 1:
                raise ValueError(
                    f"{path.name}: bands have different dtypes {ds.dtypes}; read them separately."
                )
            return _Header(
                path=path,
                count=ds.count,
                rows=ds.height,
                cols=ds.width,
                dtype=np.dtype(ds.dtypes[0]),
                crs=ds.crs,
                transform=ds.transform,
                nodata=nodatas.pop() if nodatas else None,
                names=_band_names(path, ds.descriptions),
            )
    except RasterioError as exc:
        raise ValueError(
            f"cannot read {path} as a raster (GeoTIFF, JPEG 2000, PNG, JPEG): {exc}"
        ) from exc


def _band_names(path: Path, descriptions: Sequence[str | None]) -> tuple[str, ...]:
    names = [d.strip() if d and d.strip() else None for d in descriptions]
    if len(names) == 1 and names[0] is None:
        match = _S2_BAND.search(path.stem)
        if match:
            names[0] = match.group(1).upper()
    names = [n if n is not None else f"band_{i}" for i, n in enumerate(names, start=1)]
    return tuple(names)


def _stack_names(headers: list[_Header]) -> tuple[str, ...]:
    names = [n for h in headers for n in h.names]
    if len(headers) > 1 and len(set(names)) < len(names):
        # Same names in different files (e.g. band_1 twice): qualify them with the file stem.
        names = [f"{h.path.stem}:{n}" for h in headers for n in h.names]
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
            raise ValueError(
                f"cannot stack {h.path.name} onto {first.path.name}: "
                + "; ".join(problems)
                + ". Stack only bands on the same grid (resample first, e.g. 20 m bands to 10 m)."
            )


def _isnan(value: float | None) -> bool:
    return value is not None and math.isnan(value)


def _describe_path(path: Path | tuple[Path, ...]) -> str:
    if isinstance(path, Path):
        return path.name
    return "[" + ", ".join(p.name for p in path) + "]"


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
        raise ValueError(f"bands=[] selects nothing from {label}; pass band indices or names.")
    return [i + 1 for i in resolve_bands(bands, count, names, label)]


def _to_window(window: WindowLike | None, rows: int, cols: int, label: str) -> Window:
    if window is None:
        return Window(0, 0, cols, rows)
    if isinstance(window, Window):
        values = (window.col_off, window.row_off, window.width, window.height)
        if any(float(v) != int(v) for v in values):
            raise ValueError(
                f"window {window} has fractional offsets or sizes; use whole pixels "
                "(e.g. window.round_offsets().round_lengths())."
            )
        c0, r0, w, h = (int(v) for v in values)
        if w <= 0 or h <= 0 or r0 < 0 or c0 < 0 or r0 + h > rows or c0 + w > cols:
            raise ValueError(
                f"window {window} does not lie inside {label} ({rows} rows x {cols} cols); "
                "use window.intersection(Window(0, 0, cols, rows)) or numpy-style slices."
            )
        return Window(c0, r0, w, h)
    if isinstance(window, tuple) and len(window) == 2 and all(isinstance(s, slice) for s in window):
        row_slice, col_slice = window
        r0, r1, rstep = row_slice.indices(rows)
        c0, c1, cstep = col_slice.indices(cols)
        if rstep != 1 or cstep != 1:
            raise ValueError(
                f"window slices must have step 1, got {window}; use max_size= for a decimated read."
            )
        if r1 <= r0 or c1 <= c0:
            raise ValueError(
                f"window {window} selects no pixels of {label} ({rows} rows x {cols} cols)."
            )
        return Window(c0, r0, c1 - c0, r1 - r0)
    raise ValueError(
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
    path: Path, indexes: list[int], win: Window, out_shape: tuple[int, int]
) -> np.ndarray:
    try:
        with _open(path) as ds:
            return ds.read(
                indexes,
                window=win,
                out_shape=(len(indexes), *out_shape),
                resampling=Resampling.nearest,
            )
    except RasterioError as exc:
        raise ValueError(
            f"cannot read the pixels of {path} (damaged or truncated file?): {exc}"
        ) from exc

"""Lazy multiscale views of a raster file (or a stack of single-band files) as dask arrays.

Level 0 is the full resolution. The coarser levels are the file's own overviews (internal or
``.ovr`` GeoTIFF overviews, JPEG 2000 resolution levels) when every band of every file has the same
ones; otherwise, and below the last overview, nearest-neighbour decimations by 2, 4, 8, ... until
the longest side is at most :data:`COARSEST_SIDE` pixels. Decimated pixel ``(r, c)`` of a level
``f`` times coarser than its base is base pixel ``(r * f + f // 2, c * f + f // 2)`` (clamped to
the last row / column), which is what GDAL's nearest resampling picks, and the level has
``ceil(rows / f)`` x ``ceil(cols / f)`` pixels, as GDAL sizes overviews.

Each level is a dask array of chunks aligned to the file's block grid (about 512 pixels a side,
whole strips for striped files); a chunk is one windowed read, computed only when napari (or
anyone) asks for that part. The bands of one file share each read through a small byte-bounded
cache, so three band layers of one RGB file decode each block once.

A block that cannot be decoded (a truncated or damaged file) is shown as the nodata value (or 0)
with one warning per file naming the file and the pixels, so napari keeps drawing; the stretch
sample raises instead, and the widgets read the model's pixels from the file with
:func:`napari_sam3.imagery.raster.read_raster`, which raises too: nothing the model gets is silently wrong.
"""

from __future__ import annotations

import math
import threading
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.errors import RasterioError
from rasterio.windows import Window

from napari_sam3.core.errors import BadData
from napari_sam3.imagery.raster import PathLike, RasterInfo, open_dataset, raster_info

TARGET_CHUNK = 512  # chunk side (pixels) aimed at: a few ms to read, a few per screen
COARSEST_SIDE = 1024  # decimate until the longest side is at most this
# A decimated chunk reads at most this many base pixels a side, so the coarse levels have
# several chunks that the threads of dask's scheduler decode in parallel.
_MAX_SOURCE_CHUNK = 4096
# Decimation reads full-resolution windows of at most this side and keeps every f-th pixel.
# Measured on a 10980 px deflate GeoTIFF (tiled 512, pixel-interleaved, 3 x uint16): GDAL's own
# nearest decimation (`out_shape`) of one 8192 px window took 67 s, these reads 1.9 s.
_MAX_READ = 2048
# GDAL's block cache (5 % of RAM by default) kept +560 MB after decoding such a scene once; the
# chunk cache below keeps what is reused, so GDAL's is bounded during our reads (MB).
_GDAL_CACHE_MB = 64
DEFAULT_CACHE_BYTES = 128 * 2**20  # per opened raster; a full-HD view of level 0 is ~20 MB


@dataclass(frozen=True)
class Level:
    """One level: read from ``overview`` of each file (None: full resolution), decimated by
    ``factor``; ``chunks`` are dask's per-axis chunk sizes."""

    overview: int | None
    factor: int
    shape: tuple[int, int]
    chunks: tuple[tuple[int, ...], tuple[int, ...]]
    base_shape: tuple[int, int]  # the dataset read (full resolution or the overview)


class RasterPyramid:
    """The levels of one raster (or a stack of single-band files) as lazy dask arrays."""

    def __init__(
        self, path: PathLike | Sequence[PathLike], cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self.info: RasterInfo = raster_info(path)
        self.files: tuple[Path, ...] = (
            self.info.path if isinstance(self.info.path, tuple) else (self.info.path,)
        )
        # stack band (0-based) -> (file index, 1-based band in that file)
        self._owners: list[tuple[int, int]] = []
        blocks, overviews = [], []
        for f, file in enumerate(self.files):
            with _open(file) as ds:
                blocks.append(tuple(ds.block_shapes[0]))
                overviews.append({tuple(ds.overviews(b)) for b in range(1, ds.count + 1)})
                self._owners.extend((f, b) for b in range(1, ds.count + 1))
        self.levels: list[Level] = _plan_levels(self.files, self.info, blocks[0], overviews)
        self._cache = _ChunkCache(cache_bytes)
        self._token = uuid.uuid4().hex
        self._damage_reported: set[int] = set()
        fill = self.info.nodata if self.info.nodata is not None else 0
        if np.issubdtype(self.info.dtype, np.integer) and math.isnan(fill):
            fill = 0
        self._fill = fill

    def band_levels(self, band: int):
        """The dask arrays (rows, cols) of 1-based stack band ``band``, finest first."""
        import dask.array as da

        out = []
        for index, level in enumerate(self.levels):
            source = _LevelBand(self, index, band - 1)
            out.append(
                da.from_array(
                    source,
                    chunks=level.chunks,
                    name=f"sam3-pyramid-{self._token}-{index}-{band}",
                    meta=np.empty((0, 0), self.info.dtype),
                    asarray=False,
                    fancy=False,
                )
            )
        return out

    def sample(self, blocks: int = 16) -> np.ndarray:
        """(bands, 1, n) pixels for percentile statistics, without decoding the whole scene (see
        :meth:`sample_description`). Raises ValueError where a sampled block is damaged."""
        level, picks = self._sample_plan(blocks)
        parts = []
        for i, j in picks:
            files = [self._chunk(level, f, i, j, strict=True) for f in range(len(self.files))]
            bands = np.concatenate(files, axis=0)
            parts.append(bands.reshape(bands.shape[0], -1))
        return np.concatenate(parts, axis=1)[:, None, :]

    def sample_description(self, blocks: int = 16) -> str:
        level, picks = self._sample_plan(blocks)
        if level:
            rows, cols = self.levels[level].shape
            return f"the coarsest overview ({rows} x {cols} px)"
        total = len(self.levels[0].chunks[0]) * len(self.levels[0].chunks[1])
        return f"{len(picks)} of {total} full-resolution chunks spread over the scene"

    def _sample_plan(self, blocks: int) -> tuple[int, list[tuple[int, int]]]:
        """The coarsest overview if the file has overviews, else ``blocks`` level-0 chunks on an
        even grid over the scene."""
        if len(self.levels) > 1 and self.levels[-1].factor == 1:
            level = len(self.levels) - 1
            chunks = self.levels[level].chunks
            return level, [(i, j) for i in range(len(chunks[0])) for j in range(len(chunks[1]))]
        return 0, _spread(self.levels[0].chunks, blocks)

    # ------------------------------------------------------------------------- internals

    def _assemble(self, level: int, band: int, rows: slice, cols: slice, strict: bool):
        lv = self.levels[level]
        r0, r1, _ = rows.indices(lv.shape[0])
        c0, c1, _ = cols.indices(lv.shape[1])
        out = np.empty((max(r1 - r0, 0), max(c1 - c0, 0)), self.info.dtype)
        edges_r, edges_c = np.cumsum((0,) + lv.chunks[0]), np.cumsum((0,) + lv.chunks[1])
        file, in_file = self._owners[band]
        for i in range(len(lv.chunks[0])):
            a, b = max(r0, edges_r[i]), min(r1, edges_r[i + 1])
            if a >= b:
                continue
            for j in range(len(lv.chunks[1])):
                c, d = max(c0, edges_c[j]), min(c1, edges_c[j + 1])
                if c >= d:
                    continue
                chunk = self._chunk(level, file, i, j, strict)[in_file - 1]
                out[a - r0 : b - r0, c - c0 : d - c0] = chunk[
                    a - edges_r[i] : b - edges_r[i], c - edges_c[j] : d - edges_c[j]
                ]
        return out

    def _chunk(self, level: int, file: int, i: int, j: int, strict: bool) -> np.ndarray:
        """All bands of `file` in chunk (i, j) of `level`, read once and cached (read-only)."""

        def load() -> tuple[np.ndarray, bool]:
            lv = self.levels[level]
            r0 = sum(lv.chunks[0][:i])
            c0 = sum(lv.chunks[1][:j])
            rows = np.arange(r0, r0 + lv.chunks[0][i])
            cols = np.arange(c0, c0 + lv.chunks[1][j])
            try:
                data = _read_decimated(
                    self.files[file], lv.overview, lv.factor, lv.base_shape, rows, cols
                )
                damaged = False
            except RasterioError as exc:
                if strict:
                    raise BadData(
                        f"cannot read the pixels of {self.files[file]} (rows {r0}.."
                        f"{r0 + len(rows) - 1}, cols {c0}..{c0 + len(cols) - 1} of level "
                        f"{level}; damaged or truncated file?): {exc}"
                    ) from exc
                self._report_damage(file, level, r0, c0, len(rows), len(cols), exc)
                count = sum(1 for owner, _ in self._owners if owner == file)
                data = np.full((count, len(rows), len(cols)), self._fill, self.info.dtype)
                damaged = True
            data.setflags(write=False)
            return data, damaged

        return self._cache.get((level, file, i, j), load, keep_failed=not strict)

    def _report_damage(self, file, level, r0, c0, rows, cols, exc) -> None:
        if file in self._damage_reported:
            return
        self._damage_reported.add(file)
        warnings.warn(
            f"{self.files[file]}: pixels in rows {r0}..{r0 + rows - 1}, cols {c0}.."
            f"{c0 + cols - 1} (level {level}) could not be read and are shown as "
            f"{self._fill} (damaged or truncated file?): {exc}",
            RuntimeWarning,
            stacklevel=2,
        )


class _LevelBand:
    """One band of one level, sliced by dask chunk by chunk (array protocol for from_array)."""

    def __init__(self, pyramid: RasterPyramid, level: int, band: int) -> None:
        self.pyramid, self.level, self.band = pyramid, level, band
        self.shape = pyramid.levels[level].shape
        self.dtype = pyramid.info.dtype
        self.ndim = 2

    def __getitem__(self, key) -> np.ndarray:
        rows, cols = key
        return self.pyramid._assemble(self.level, self.band, rows, cols, strict=False)


class _ChunkCache:
    """Least-recently-used chunks up to a byte budget; concurrent requests for one key wait for
    a single read."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._items: OrderedDict = OrderedDict()
        self._bytes = 0
        self._pending: dict = {}

    def get(self, key, load: Callable[[], tuple[np.ndarray, bool]], keep_failed: bool = True):
        while True:
            with self._lock:
                if key in self._items:
                    value, damaged = self._items[key]
                    if keep_failed or not damaged:
                        self._items.move_to_end(key)
                        return value
                    self._drop(key)
                waiting = self._pending.get(key)
                if waiting is None:
                    done = self._pending[key] = threading.Event()
                    break
            waiting.wait()
        try:
            value, damaged = load()
            with self._lock:
                self._items[key] = (value, damaged)
                self._bytes += value.nbytes
                while self._bytes > self.max_bytes and len(self._items) > 1:
                    self._drop(next(iter(self._items)))
            return value
        finally:
            with self._lock:
                self._pending.pop(key, None)
            done.set()

    def _drop(self, key) -> None:
        value, _ = self._items.pop(key)
        self._bytes -= value.nbytes


def _open(path: Path | str, overview: int | None = None):
    """A dataset to use in ``with`` (a URL's network options held while it is open)."""
    return open_dataset(path, overview)


def _read_decimated(path, overview, factor, base_shape, rows, cols) -> np.ndarray:
    """All bands at base pixels (rows * f + f // 2, cols * f + f // 2), clamped to the base."""
    half = factor // 2
    src_rows = np.minimum(rows * factor + half, base_shape[0] - 1)
    src_cols = np.minimum(cols * factor + half, base_shape[1] - 1)
    with rasterio.Env(GDAL_CACHEMAX=_GDAL_CACHE_MB), _open(path, overview) as ds:
        if factor == 1:
            window = Window(int(src_cols[0]), int(src_rows[0]), len(src_cols), len(src_rows))
            return ds.read(window=window)
        out = np.empty((ds.count, len(src_rows), len(src_cols)), np.dtype(ds.dtypes[0]))
        block_r, block_c = ds.block_shapes[0]
        for ri in _groups(src_rows, block_r):
            ra, rb = int(src_rows[ri[0]]), int(src_rows[ri[-1]]) + 1
            for ci in _groups(src_cols, block_c):
                ca, cb = int(src_cols[ci[0]]), int(src_cols[ci[-1]]) + 1
                part = ds.read(window=Window(ca, ra, cb - ca, rb - ra))
                out[:, ri[0] : ri[-1] + 1, ci[0] : ci[-1] + 1] = part[:, src_rows[ri] - ra][
                    :, :, src_cols[ci] - ca
                ]
        return out


def _groups(indices: np.ndarray, block: int) -> list[np.ndarray]:
    """Positions of `indices` grouped by block-aligned spans of at most ~_MAX_READ pixels, so a
    block is never decoded for two groups."""
    span = max(block, block * (_MAX_READ // max(block, 1)))
    keys = indices // span
    cuts = np.flatnonzero(np.diff(keys)) + 1
    return np.split(np.arange(len(indices)), cuts)


def _plan_levels(files, info: RasterInfo, block: tuple[int, int], overviews) -> list[Level]:
    rows, cols = info.rows, info.cols
    levels = [Level(None, 1, (rows, cols), _chunks((rows, cols), block, 1), (rows, cols))]
    shared = overviews[0] if all(o == overviews[0] for o in overviews) else None
    factors = list(next(iter(shared))) if shared is not None and len(shared) == 1 else []
    base_overview, base_shape, base_block = None, (rows, cols), block
    for index, _ in enumerate(factors):
        with _open(files[0], index) as ds:
            shape, ov_block = (ds.height, ds.width), tuple(ds.block_shapes[0])
        if shape[0] >= levels[-1].shape[0] and shape[1] >= levels[-1].shape[1]:
            break  # not coarser: stop at what is usable
        levels.append(Level(index, 1, shape, _chunks(shape, ov_block, 1), shape))
        base_overview, base_shape, base_block = index, shape, ov_block
    factor = 2
    while max(levels[-1].shape) > COARSEST_SIDE:
        shape = (-(-base_shape[0] // factor), -(-base_shape[1] // factor))
        levels.append(
            Level(base_overview, factor, shape, _chunks(base_shape, base_block, factor), base_shape)
        )
        factor *= 2
    return levels


def _chunks(base_shape, block, factor: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-axis output chunk sizes: each chunk reads a whole number of base blocks (about
    TARGET_CHUNK output pixels, at most _MAX_SOURCE_CHUNK base pixels) and of `factor`s."""
    want = TARGET_CHUNK if factor == 1 else min(TARGET_CHUNK * factor, _MAX_SOURCE_CHUNK)
    out = []
    for n, b in zip(base_shape, block, strict=True):
        b = max(1, min(int(b), n))
        step = b * factor // math.gcd(b, factor)  # a multiple of the block and of the factor
        source = max(step, -(-want // step) * step)
        total = -(-n // factor)
        if source >= n:
            out.append((total,))
            continue
        size = source // factor
        sizes = [size] * (total // size)
        if total % size:
            sizes.append(total % size)
        out.append(tuple(sizes))
    return out[0], out[1]


def _spread(chunks, count: int) -> list[tuple[int, int]]:
    """About `count` chunk indices on an even grid over the chunk grid, corners included."""
    side = max(1, round(math.sqrt(count)))
    rows = sorted({round(v) for v in np.linspace(0, len(chunks[0]) - 1, side)})
    cols = sorted({round(v) for v in np.linspace(0, len(chunks[1]) - 1, side)})
    return [(i, j) for i in rows for j in cols]

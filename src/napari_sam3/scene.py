"""Whole scenes: tiled inference over any raster, results in scene pixels, GIS layers out.

A scene (a Sentinel-2 tile is 10980 x 10980 pixels; the model sees S x S) is cut into
overlapping tiles (:func:`tile_grid`) that are read one at a time with windowed reads, stretched
with ONE set of limits computed for the whole scene (:func:`~napari_sam3.stretch.scene_stretch`,
a decimated read) and sent to the client, which letterboxes each tile into the model input (a tile
larger than S is downsampled). All keywords of a tile share one vision pass (``client.multi``).

Every detection is mapped to scene pixels and kept as a :class:`SceneMask`: the run-length code
of its bounding-box crop plus the crop's offset, never a dense scene-sized array. Memory thus
grows with the tiles in flight (two: one being read while the model runs on the other) and the
detections' own size, not with the scene; GDAL's block cache is capped at ``GDAL_CACHE_BYTES``
while the scene is read.

Across tiles, in this order:

1. **Seam merge.** A detection whose mask touches an inner edge of its tile (an edge that is not
   the scene's border) may be a piece of an object cut by that tile. Two detections of the same
   keyword from different tiles, at least one of them cut, are joined when their masks agree where
   both tiles see the scene: inside the tiles' shared region (their overlap), the IoU of the two
   masks is at least ``seam_iou``; for tiles that only abut (``overlap=0``), the same test
   compares the pixel rows/columns on either side of the seam. Joined detections (transitively)
   become one object: the union of the masks and boxes, the **maximum** score, and the tile and
   prompt kind of the best-scoring piece; ``merged`` counts the pieces.
2. **Deduplication.** Greedy by descending score, as :func:`~napari_sam3.masks.dedup.dedup_masks`:
   a detection is dropped when ``|A & B| / min(|A|, |B|) >= dedup`` for an already kept detection
   of the same keyword (the same object seen by two overlapping tiles, or nested in one).
   Pairs from one tile were deduplicated by the client already and are not compared again.

Nodata: a pixel is nodata when any of its bands equals the nodata value (or is NaN). Tiles that
are all nodata skip the model; a detection lying mostly (more than half its pixels) in nodata is
dropped, and the others lose their nodata pixels.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import rasterio
from rasterio.transform import Affine

from .concept import Concept
from .masks.rle import RleMask
from .raster import BandKey, RasterInfo, raster_info, read_raster
from .results import empty_result
from .stretch import StretchStats, scene_stretch, to_model_rgb

if TYPE_CHECKING:
    import geopandas as gpd

__all__ = [
    "SceneMask",
    "Tile",
    "scene_geodataframe",
    "scene_labels",
    "segment_scene",
    "tile_grid",
    "write_scene",
]

PathLike = str | os.PathLike
Source = PathLike | Sequence[PathLike]
ConceptLike = Concept | PathLike
Progress = bool | Callable[[int, int], Any] | None

SCENE_COLUMNS = ["box", "score", "mask", "keyword", "prompt_kind", "tile", "merged", "source"]
PHASES = ("read", "stretch", "model", "merge")
# GDAL's block cache while a scene is read: by default 5% of the machine's memory, which a
# decimated read of a big GeoTIFF without overviews fills with the whole decompressed scene.
GDAL_CACHE_BYTES = 256 * 2**20
# scene_geodataframe polygonizes up to _GROUP detections per to_geodataframe call, on a window of
# at most 2 x 2 cells: at most 32 MiB of temporary dense masks.
_GROUP = 32
_CELL = 512


# ----------------------------------------------------------------------------- masks


class SceneMask:
    """One detection's mask in a scene, kept as the RLE of its bounding-box crop plus its offset.

    ``shape`` is the scene's (rows, cols); ``bbox`` is ``(x1, y1, x2, y2)`` in scene pixels
    (pixel edges, ends exclusive). :meth:`crop` gives the dense crop, :meth:`window` any part of
    the scene, and ``np.asarray(mask)`` / :meth:`to_dense` the full scene (large: rows x cols
    bytes).
    """

    __slots__ = ("col", "rle", "row", "scene_shape")

    def __init__(self, rle: RleMask, row: int, col: int, scene_shape: tuple[int, int]) -> None:
        h, w = rle.shape
        rows, cols = (int(v) for v in scene_shape)
        if row < 0 or col < 0 or row + h > rows or col + w > cols:
            raise ValueError(
                f"a crop of {h}x{w} at row {row}, column {col} does not fit a scene of "
                f"{rows}x{cols} pixels"
            )
        self.rle = rle
        self.row = int(row)
        self.col = int(col)
        self.scene_shape = (rows, cols)

    @classmethod
    def from_crop(
        cls, pixels: np.ndarray, row: int, col: int, scene_shape: tuple[int, int]
    ) -> SceneMask:
        """The mask whose pixels inside the window at (row, col) are ``pixels`` (bool 2-D)."""
        pixels = np.asarray(pixels, dtype=bool)
        rows = np.flatnonzero(pixels.any(axis=1))
        if rows.size == 0:
            return cls(RleMask.from_dense(np.zeros((0, 0), bool)), 0, 0, scene_shape)
        cols_ = np.flatnonzero(pixels.any(axis=0))
        tight = pixels[rows[0] : rows[-1] + 1, cols_[0] : cols_[-1] + 1]
        return cls(RleMask.from_dense(tight), row + int(rows[0]), col + int(cols_[0]), scene_shape)

    @property
    def shape(self) -> tuple[int, int]:
        return self.scene_shape

    @property
    def area(self) -> int:
        return self.rle.area

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        h, w = self.rle.shape
        if self.rle.area == 0:
            return (0, 0, 0, 0)
        return (self.col, self.row, self.col + w, self.row + h)

    def crop(self) -> tuple[int, int, np.ndarray]:
        """(first row, first column, dense bool crop): the mask's pixels within its bbox."""
        return self.row, self.col, self.rle.to_dense()

    def window(self, r0: int, c0: int, r1: int, c1: int) -> np.ndarray:
        """The mask's pixels in scene rows ``r0:r1`` and columns ``c0:c1`` (bool)."""
        out = np.zeros((max(r1 - r0, 0), max(c1 - c0, 0)), dtype=bool)
        h, w = self.rle.shape
        top, bottom = max(r0, self.row), min(r1, self.row + h)
        left, right = max(c0, self.col), min(c1, self.col + w)
        if top >= bottom or left >= right:
            return out
        band = self._rows(top - self.row, bottom - self.row)
        out[top - r0 : bottom - r0, left - c0 : right - c0] = band[
            :, left - self.col : right - self.col
        ]
        return out

    def _rows(self, first: int, stop: int) -> np.ndarray:
        """Crop rows ``first:stop``, decoded from the runs that reach them only."""
        w = self.rle.shape[1]
        ends = np.cumsum(self.rle.runs)
        lo, hi = first * w, stop * w
        a = int(np.searchsorted(ends, lo, side="right"))  # the run holding pixel lo
        b = int(np.searchsorted(ends, hi, side="left")) + 1  # ... and pixel hi - 1
        ends = np.minimum(ends[a:b], hi)
        lengths = np.diff(ends, prepend=lo)
        values = (np.arange(a, b) & 1).astype(bool)  # runs alternate, background first
        return np.repeat(values, lengths).reshape(stop - first, w)

    def to_dense(self) -> np.ndarray:
        rows, cols = self.scene_shape
        return self.window(0, 0, rows, cols)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        dense = self.to_dense()
        return dense if dtype is None else dense.astype(dtype)

    def __repr__(self) -> str:
        return f"SceneMask(scene={self.scene_shape}, bbox={self.bbox}, area={self.area})"


# ----------------------------------------------------------------------------- tiles


@dataclass(frozen=True)
class Tile:
    """One window of the scene: rows ``row:row + height``, columns ``col:col + width``."""

    index: int
    row: int
    col: int
    height: int
    width: int

    @property
    def bounds(self) -> tuple[int, int, int, int]:
        """(r0, c0, r1, c1), ends exclusive."""
        return self.row, self.col, self.row + self.height, self.col + self.width

    @property
    def slices(self) -> tuple[slice, slice]:
        return np.s_[self.row : self.row + self.height, self.col : self.col + self.width]


def _starts(length: int, size: int, overlap: int) -> list[int]:
    if length <= size:
        return [0]
    stride = size - overlap
    n = math.ceil((length - size) / stride) + 1
    # Evenly spread, the last tile flush with the far edge: every tile is whole, and neighbours
    # overlap by at least `overlap`.
    return [int(v) for v in np.round(np.linspace(0, length - size, n))]


def tile_grid(rows: int, cols: int, tile_size: int, overlap: int) -> list[Tile]:
    """Overlapping ``tile_size`` squares covering a ``rows x cols`` scene, row by row.

    Neighbouring tiles overlap by at least ``overlap`` pixels; the last tile of a row or column
    sits flush with the scene's edge, so every tile is whole. A scene side shorter than a tile
    gives one tile of that side's length.
    """
    for name, value in (("rows", rows), ("cols", cols), ("tile_size", tile_size)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int | np.integer):
        raise ValueError(f"overlap must be a whole number of pixels, got {overlap!r}")
    if not 0 <= overlap <= tile_size // 2:
        raise ValueError(
            f"overlap must be between 0 and half the tile ({tile_size // 2} px), got {overlap}"
        )
    tiles = []
    for r in _starts(int(rows), int(tile_size), int(overlap)):
        for c in _starts(int(cols), int(tile_size), int(overlap)):
            h, w = min(tile_size, rows - r), min(tile_size, cols - c)
            tiles.append(Tile(len(tiles), r, c, int(h), int(w)))
    return tiles


# ----------------------------------------------------------------------------- inference


@dataclass
class _Detection:
    mask: SceneMask
    box: np.ndarray  # x1, y1, x2, y2 in scene pixels
    score: float
    keyword: str
    prompt_kind: str
    tile: int
    cut: bool  # touches an inner edge of its tile
    merged: int = 1


@dataclass
class _Query:
    """What to ask of every tile: the texts (one vision pass) and the concepts."""

    texts: list[str]
    concepts: list[tuple[str, Concept]]
    options: dict[str, Any]

    def run(self, client: Any, prepared: Any) -> list[pd.DataFrame]:
        """One vision pass per tile for every keyword and concept (chunks of `max_keywords`)."""
        if len(self.texts) == 1 and not self.concepts:
            return [client.segment(prepared, self.texts[0], **self.options)]
        queries = [("text", t) for t in self.texts] + [("concept", c) for c in self.concepts]
        limit = int(client.manifest.get("max_keywords", len(queries)))
        frames = []
        for i in range(0, len(queries), limit):
            chunk = queries[i : i + limit]
            texts = [q for kind, q in chunk if kind == "text"]
            concepts = [q for kind, q in chunk if kind == "concept"]
            frames.append(client.multi(prepared, texts, concepts=concepts, **self.options))
        return frames


def segment_scene(
    client: Any,
    source: Source,
    prompt: str | None = None,
    keywords: Sequence[str] | None = None,
    concept: ConceptLike | Sequence[ConceptLike] | None = None,
    *,
    tile_size: int | None = None,
    overlap: int | None = None,
    bands: Sequence[BandKey] | None = None,
    stats: StretchStats | None = None,
    nodata: float | None = None,
    score_thr: float | None = None,
    mask_thr: float | None = None,
    max_det: int | None = None,
    dedup: float | None = 0.85,
    seam_iou: float = 0.5,
    progress: Progress = True,
) -> pd.DataFrame:
    """Segment a whole raster tile by tile; one row per object, in scene pixels.

    Args:
        client: a :class:`~napari_sam3.client.Sam3Client` (local or Triton).
        source: a raster file, or a list of single-band files to stack (as ``read_raster``).
        prompt, keywords: text to look for; all of them share one vision pass per tile.
        concept: a :class:`~napari_sam3.concept.Concept`, a concept ``.npz`` file, or a list of
            them (each runs on every tile; its ``keyword`` is the concept's name or file stem).
        tile_size: tile side in scene pixels; default the model's input size ``client.image_size``
            (no resampling). Larger tiles are downsampled by the client's letterbox.
        overlap: pixels shared by neighbouring tiles (0 .. tile_size // 2); default tile_size // 8.
        bands: the 1 or 3 bands to use (1-based or names), needed for more than 3 bands.
        stats: stretch limits; default one :func:`~napari_sam3.stretch.scene_stretch` of the
            whole scene (uint8 scenes are used as they are).
        nodata: nodata value; default the raster's own.
        score_thr, mask_thr, max_det, dedup: as for ``client.segment``, per tile; ``dedup`` also
            removes duplicates across tiles (None keeps them all).
        seam_iou: how well two pieces must agree where their tiles overlap to be joined.
        progress: True for a tqdm bar, False/None for none, or ``callable(done, total)`` called
            after every tile (e.g. to drive napari's progress, or to cancel by raising).

    Returns:
        Columns ``box`` (float32 x1, y1, x2, y2 in scene pixels), ``score``, ``mask``
        (:class:`SceneMask`), ``keyword``, ``prompt_kind``, ``tile`` (index into
        ``df.attrs["tiles"]``), ``merged`` (pieces joined across seams), ``source`` (file name);
        best score first. ``df.attrs`` holds ``scene`` (shape, CRS, transform), ``tiles``,
        ``skipped_tiles`` (all nodata) and ``timings`` (seconds per phase: read, stretch
        (the scene's statistics, ``scene_stats``, and every tile's stretch and letterbox),
        model, merge; and wall).
    """
    wall0 = time.perf_counter()
    query = _query(client, prompt, keywords, concept, score_thr, mask_thr, max_det, dedup)
    if isinstance(seam_iou, bool) or not isinstance(seam_iou, int | float) or not 0 < seam_iou <= 1:
        raise ValueError(f"seam_iou must be within (0, 1], got {seam_iou!r}")
    info = raster_info(source)
    size = int(client.image_size) if tile_size is None else tile_size
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 8:
        raise ValueError(f"tile_size must be a whole number of pixels >= 8, got {tile_size!r}")
    overlap = size // 8 if overlap is None else overlap
    tiles = tile_grid(info.rows, info.cols, int(size), overlap)
    timings = dict.fromkeys(PHASES, 0.0)

    with rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_BYTES):
        detections, skipped = _run_tiles(
            client, source, info, tiles, query, bands, stats, nodata, progress, timings
        )

    t0 = time.perf_counter()
    detections = _merge_seams(detections, tiles, seam_iou)
    if dedup is not None:
        detections = _dedup(detections, dedup)
    frame = _frame(detections, _source_name(info.path))
    timings["merge"] += time.perf_counter() - t0
    timings["wall"] = time.perf_counter() - wall0
    frame.attrs.update(
        scene={
            "path": info.path,
            "shape": (info.rows, info.cols),
            "crs": None if info.crs is None else info.crs.to_string(),
            "transform": tuple(info.transform)[:6],
        },
        tiles=tiles,
        skipped_tiles=skipped,
        timings=timings,
    )
    return frame


def _run_tiles(
    client: Any,
    source: Source,
    info: RasterInfo,
    tiles: list[Tile],
    query: _Query,
    bands: Sequence[BandKey] | None,
    stats: StretchStats | None,
    nodata: float | None,
    progress: Progress,
    timings: dict[str, float],
) -> tuple[list[_Detection], int]:
    """Every tile through the model, one read ahead: (detections in scene pixels, tiles skipped)."""
    t0 = time.perf_counter()
    if stats is None and info.dtype != np.uint8:
        stats = scene_stretch(source, bands=bands, nodata=nodata)
    timings["scene_stats"] = time.perf_counter() - t0
    timings["stretch"] += timings["scene_stats"]

    def load(tile: Tile) -> tuple[Any, np.ndarray | None, float, float]:
        t0 = time.perf_counter()
        raster = read_raster(source, bands=bands, window=tile.slices)
        t1 = time.perf_counter()
        invalid = _nodata_pixels(raster.data, raster.nodata if nodata is None else nodata)
        if invalid is not None and invalid.all():
            return None, invalid, t1 - t0, time.perf_counter() - t1
        rgb = to_model_rgb(raster, stats=stats, nodata=nodata)
        if invalid is not None:
            rgb[invalid] = 0
        prepared = client.prepare(rgb)
        return prepared, invalid, t1 - t0, time.perf_counter() - t1

    report = _progress(progress, len(tiles), _source_name(info.path))
    detections: list[_Detection] = []
    skipped = 0
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(load, tiles[0])
            for k, tile in enumerate(tiles):
                prepared, invalid, t_read, t_stretch = pending.result()
                if k + 1 < len(tiles):
                    pending = pool.submit(load, tiles[k + 1])
                timings["read"] += t_read
                timings["stretch"] += t_stretch
                if prepared is None:
                    skipped += 1
                else:
                    t0 = time.perf_counter()
                    frames = query.run(client, prepared)
                    t1 = time.perf_counter()
                    for frame in frames:
                        detections += _tile_detections(frame, tile, invalid, info)
                    timings["model"] += t1 - t0
                    timings["merge"] += time.perf_counter() - t1
                report(k + 1)
    finally:
        report(None)

    return detections, skipped


def _query(
    client: Any,
    prompt: str | None,
    keywords: Sequence[str] | None,
    concept: ConceptLike | Sequence[ConceptLike] | None,
    score_thr: float | None,
    mask_thr: float | None,
    max_det: int | None,
    dedup: float | None,
) -> _Query:
    texts: list[str] = []
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(
                f"prompt must be a non-empty string such as 'building', got {prompt!r}"
            )
        texts.append(prompt.strip())
    if keywords is not None:
        if isinstance(keywords, str):
            raise TypeError("keywords must be a list of strings, e.g. ['building', 'road']")
        for word in keywords:
            if not isinstance(word, str) or not word.strip():
                raise ValueError(f"every keyword must be a non-empty string, got {word!r}")
            if word.strip() not in texts:
                texts.append(word.strip())
    concepts = [_load_concept(c, client) for c in _as_list(concept)]
    if not texts and not concepts:
        raise ValueError(
            "nothing to look for: give a prompt (e.g. 'building'), keywords or a concept"
        )
    options = {"score_thr": score_thr, "mask_thr": mask_thr, "max_det": max_det, "dedup": dedup}
    return _Query(texts, concepts, options)


def _as_list(concept: ConceptLike | Sequence[ConceptLike] | None) -> list[ConceptLike]:
    if concept is None:
        return []
    if isinstance(concept, Concept | str | os.PathLike):
        return [concept]
    return list(concept)


def _load_concept(item: ConceptLike, client: Any) -> tuple[str, Concept]:
    if isinstance(item, str | os.PathLike):
        concept = Concept.load(item)
        name = concept.name or Path(item).stem
    elif isinstance(item, Concept):
        concept, name = item, item.name or "concept"
    else:
        raise TypeError(f"a concept is a Concept or a .npz file, got {type(item).__name__}")
    concept.check_model(client.model_id)
    return name, concept


def _nodata_pixels(data: np.ndarray, nodata: float | None) -> np.ndarray | None:
    """Bool (rows, cols): True where any band is nodata or NaN; None when there is none."""
    invalid = None
    if nodata is not None and not math.isnan(nodata):
        invalid = (data == data.dtype.type(nodata)).any(axis=0) if _fits(data, nodata) else None
    if data.dtype.kind == "f":
        nan = np.isnan(data).any(axis=0)
        invalid = nan if invalid is None else invalid | nan
    if invalid is not None and not invalid.any():
        return None
    return invalid


def _fits(data: np.ndarray, value: float) -> bool:
    if data.dtype.kind == "f":
        return True
    info = np.iinfo(data.dtype)
    return value == int(value) and info.min <= value <= info.max


def _tile_detections(
    frame: pd.DataFrame, tile: Tile, invalid: np.ndarray | None, info: RasterInfo
) -> list[_Detection]:
    """A tile's result rows -> detections in scene pixels (nodata pixels removed)."""
    from .gis import _crops, _tight  # gis crops FrameMasks without a dense frame

    if not len(frame):
        return []
    out = []
    r0, c0, r1, c1 = tile.bounds
    edges = (r0 > 0, c0 > 0, r1 < info.rows, c1 < info.cols)  # top, left, bottom, right
    shift = np.array([c0, r0, c0, r0], dtype=np.float32)
    crops = _crops(frame, (tile.height, tile.width))
    for (cr, cc, pixels), row in zip(crops, frame.itertuples(index=False), strict=True):
        area = int(np.count_nonzero(pixels))
        if area == 0:
            continue
        if invalid is not None:
            bad = invalid[cr : cr + pixels.shape[0], cc : cc + pixels.shape[1]]
            lost = int(np.count_nonzero(pixels & bad))
            if 2 * lost > area:
                continue
            if lost:
                cr, cc, pixels = _tight(cr, cc, pixels & ~bad)
        mask = SceneMask.from_crop(pixels, r0 + cr, c0 + cc, (info.rows, info.cols))
        x1, y1, x2, y2 = mask.bbox
        touches = (y1 == r0, x1 == c0, y2 == r1, x2 == c1)
        out.append(
            _Detection(
                mask=mask,
                box=np.asarray(row.box, dtype=np.float32) + shift,
                score=float(row.score),
                keyword=str(row.keyword),
                prompt_kind=str(row.prompt_kind),
                tile=tile.index,
                cut=any(e and t for e, t in zip(edges, touches, strict=True)),
            )
        )
    return out


# ----------------------------------------------------------------------------- seams and duplicates


def _box_pairs(boxes: np.ndarray, touching: bool) -> np.ndarray:
    """(k, 2) index pairs i < j of boxes (x1, y1, x2, y2, ends exclusive) that overlap.

    ``touching`` also pairs boxes that only share an edge.
    """
    import shapely

    if len(boxes) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    geoms = shapely.box(boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3])
    a, b = shapely.STRtree(geoms).query(geoms, predicate="intersects")
    keep = a < b
    a, b = a[keep], b[keep]
    if not touching:
        strict = (
            (boxes[a, 0] < boxes[b, 2])
            & (boxes[b, 0] < boxes[a, 2])
            & (boxes[a, 1] < boxes[b, 3])
            & (boxes[b, 1] < boxes[a, 3])
        )
        a, b = a[strict], b[strict]
    return np.stack([a, b], axis=1)


Window = tuple[int, int, int, int]  # r0, c0, r1, c1


def _seam_windows(a: Tile, b: Tile) -> tuple[Window, Window] | None:
    """Where tiles ``a`` and ``b`` both see the scene: their overlap (the same window twice), or
    for abutting tiles the pixel line on each side of the seam; None if they do not meet."""
    ar0, ac0, ar1, ac1 = a.bounds
    br0, bc0, br1, bc1 = b.bounds
    r0, c0, r1, c1 = max(ar0, br0), max(ac0, bc0), min(ar1, br1), min(ac1, bc1)
    if r0 < r1 and c0 < c1:
        return (r0, c0, r1, c1), (r0, c0, r1, c1)
    if r0 < r1 and (ac1 == bc0 or bc1 == ac0):  # side by side
        x = ac1 if ac1 == bc0 else ac0
        left, right = (r0, x - 1, r1, x), (r0, x, r1, x + 1)
        return (left, right) if ac1 == bc0 else (right, left)
    if c0 < c1 and (ar1 == br0 or br1 == ar0):  # one above the other
        y = ar1 if ar1 == br0 else ar0
        above, below = (y - 1, c0, y, c1), (y, c0, y + 1, c1)
        return (above, below) if ar1 == br0 else (below, above)
    return None


def _merge_seams(dets: list[_Detection], tiles: list[Tile], seam_iou: float) -> list[_Detection]:
    if len(tiles) < 2 or not any(d.cut for d in dets):
        return dets
    parent = list(range(len(dets)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    boxes = np.array([d.mask.bbox for d in dets], dtype=np.int64)
    for i, j in _box_pairs(boxes, touching=True).tolist():
        a, b = dets[i], dets[j]
        if a.keyword != b.keyword or a.tile == b.tile or not (a.cut or b.cut):
            continue
        windows = _seam_windows(tiles[a.tile], tiles[b.tile])
        if windows is None:
            continue
        pa, pb = a.mask.window(*windows[0]), b.mask.window(*windows[1])
        inter = int(np.count_nonzero(pa & pb))
        if inter and inter >= seam_iou * int(np.count_nonzero(pa | pb)):
            parent[root(i)] = root(j)

    groups: dict[int, list[int]] = {}
    for i in range(len(dets)):
        groups.setdefault(root(i), []).append(i)
    return [dets[g[0]] if len(g) == 1 else _union([dets[i] for i in g]) for g in groups.values()]


def _union(parts: list[_Detection]) -> _Detection:
    boxes = np.array([p.mask.bbox for p in parts])
    c0, r0 = boxes[:, :2].min(axis=0)
    c1, r1 = boxes[:, 2:].max(axis=0)
    pixels = np.zeros((r1 - r0, c1 - c0), dtype=bool)
    for p in parts:
        pixels |= p.mask.window(r0, c0, r1, c1)
    best = max(parts, key=lambda p: p.score)
    model_boxes = np.array([p.box for p in parts])
    return _Detection(
        mask=SceneMask.from_crop(pixels, int(r0), int(c0), best.mask.scene_shape),
        box=np.concatenate([model_boxes[:, :2].min(axis=0), model_boxes[:, 2:].max(axis=0)]),
        score=best.score,
        keyword=best.keyword,
        prompt_kind=best.prompt_kind,
        tile=best.tile,
        cut=False,
        merged=sum(p.merged for p in parts),
    )


def _dedup(dets: list[_Detection], threshold: float) -> list[_Detection]:
    if len(dets) < 2:
        return dets
    boxes = np.array([d.mask.bbox for d in dets], dtype=np.int64)
    neighbours: dict[int, list[int]] = {}
    for i, j in _box_pairs(boxes, touching=False).tolist():
        a, b = dets[i], dets[j]
        if a.keyword != b.keyword or (a.tile == b.tile and a.merged == b.merged == 1):
            continue
        neighbours.setdefault(i, []).append(j)
        neighbours.setdefault(j, []).append(i)
    order = np.argsort(-np.array([d.score for d in dets]), kind="stable")
    kept: set[int] = set()
    for i in order.tolist():
        if not any(
            j in kept and _covers(dets[i], dets[j], threshold) for j in neighbours.get(i, ())
        ):
            kept.add(i)
    return [dets[i] for i in sorted(kept)]


def _covers(a: _Detection, b: _Detection, threshold: float) -> bool:
    ax1, ay1, ax2, ay2 = a.mask.bbox
    bx1, by1, bx2, by2 = b.mask.bbox
    window = (max(ay1, by1), max(ax1, bx1), min(ay2, by2), min(ax2, bx2))
    inter = int(np.count_nonzero(a.mask.window(*window) & b.mask.window(*window)))
    return inter >= threshold * min(a.mask.area, b.mask.area)


def _frame(dets: list[_Detection], source: str) -> pd.DataFrame:
    if not dets:
        frame = empty_result({"tile": np.int64, "merged": np.int64, "source": object})
        return frame[SCENE_COLUMNS]
    dets = sorted(dets, key=lambda d: -d.score)
    return pd.DataFrame(
        {
            "box": [d.box.astype(np.float32) for d in dets],
            "score": np.array([d.score for d in dets], dtype=np.float32),
            "mask": [d.mask for d in dets],
            "keyword": [d.keyword for d in dets],
            "prompt_kind": [d.prompt_kind for d in dets],
            "tile": np.array([d.tile for d in dets], dtype=np.int64),
            "merged": np.array([d.merged for d in dets], dtype=np.int64),
            "source": source,
        }
    )


# ----------------------------------------------------------------------------- progress


def _progress(progress: Progress, total: int, name: str) -> Callable[[int | None], None]:
    """A function called with the tiles done so far, and None at the end."""
    if progress is None or progress is False:
        return lambda done: None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=name, unit="tile")

        def update(done: int | None) -> None:
            if done is None:
                bar.close()
            else:
                bar.update(done - bar.n)

        return update
    if callable(progress):
        return lambda done: None if done is None else progress(done, total)
    raise TypeError(f"progress must be True, False or a callable(done, total), got {progress!r}")


def _source_name(path: Path | tuple[Path, ...]) -> str:
    if isinstance(path, tuple):
        return "+".join(p.name for p in path)
    return Path(path).name


# ----------------------------------------------------------------------------- GIS output


def _scene_info(
    df: pd.DataFrame, raster: PathLike | Sequence[PathLike] | RasterInfo | None
) -> RasterInfo:
    if raster is None:
        scene = df.attrs.get("scene")
        if not scene:
            raise ValueError(
                "the DataFrame does not say which raster it came from; pass raster= (the scene's "
                "path or RasterInfo)"
            )
        raster = scene["path"]
    info = raster if isinstance(raster, RasterInfo) else raster_info(raster)
    if len(df):
        shape = df["mask"].iloc[0].shape
        if tuple(shape) != (info.rows, info.cols):
            raise ValueError(
                f"the masks are {shape[0]}x{shape[1]} pixels but the raster is "
                f"{info.rows}x{info.cols}; pass the raster the scene was segmented from"
            )
    return info


def _check_scene_masks(df: pd.DataFrame) -> None:
    bad = [i for i, m in enumerate(df["mask"]) if not isinstance(m, SceneMask)]
    if bad:
        raise TypeError(
            f"rows {bad[:5]} do not hold SceneMask masks; scene_geodataframe takes the result of "
            "segment_scene (for client results use gis.to_geodataframe)"
        )


def _groups(boxes: np.ndarray) -> Iterable[np.ndarray]:
    """Row indices in groups polygonized together: small detections near one another, at most
    _GROUP a time within a window of 2 x 2 cells; a larger detection alone, on its own crop."""
    keys: dict[tuple[int, int] | int, list[int]] = {}
    for i, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
        gy, gx = y1 // _CELL, x1 // _CELL
        fits = y2 <= (gy + 2) * _CELL and x2 <= (gx + 2) * _CELL
        keys.setdefault((gy, gx) if fits else -1 - i, []).append(i)
    for members in keys.values():
        for k in range(0, len(members), _GROUP):
            yield np.array(members[k : k + _GROUP])


def scene_geodataframe(
    df: pd.DataFrame,
    raster: PathLike | Sequence[PathLike] | RasterInfo | None = None,
    simplify: float = 0.0,
) -> gpd.GeoDataFrame:
    """:func:`~napari_sam3.gis.to_geodataframe` for :func:`segment_scene` results.

    Polygons in the raster's CRS (pixel coordinates, with a UserWarning, when it has none), with
    ``label_id`` (the id in :func:`scene_labels`), ``score``, ``keyword``, ``prompt_kind``,
    ``source``, ``area_px``, ``tile``, ``merged``. ``raster`` defaults to the scene the
    DataFrame came from. No mask is made scene-sized: nearby detections are polygonized together
    on a small window of the scene.
    """
    import geopandas as gpd

    from .gis import to_geodataframe

    if "mask" not in df.columns:
        raise ValueError(f"scene_geodataframe needs a 'mask' column; got {list(df.columns)}")
    _check_scene_masks(df)
    info = _scene_info(df, raster)
    table = df.reset_index(drop=True)
    if not len(table):
        return to_geodataframe(table, info)
    boxes = np.array([m.bbox for m in table["mask"]], dtype=np.int64)
    parts, order = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in _groups(boxes):
            x1, y1 = boxes[rows, :2].min(axis=0)
            x2, y2 = boxes[rows, 2:].max(axis=0)
            sub = table.iloc[rows].copy()
            sub["mask"] = [m.window(y1, x1, y2, x2) for m in sub["mask"]]
            window = dataclasses.replace(
                info,
                shape=(info.count, int(y2 - y1), int(x2 - x1)),
                transform=info.transform @ Affine.translation(int(x1), int(y1)),
            )
            parts.append(to_geodataframe(sub, window, simplify=simplify))
            order.append(rows)
    for message in {str(w.message): w for w in caught}.values():
        warnings.warn(message.message, message.category, stacklevel=2)
    gdf = pd.concat(parts, ignore_index=True)
    gdf.index = np.concatenate(order)
    gdf = gdf.sort_index().reset_index(drop=True)
    gdf["label_id"] = np.arange(1, len(gdf) + 1, dtype=np.int32)
    return gpd.GeoDataFrame(gdf, geometry="geometry", crs=parts[0].crs)


def scene_labels(df: pd.DataFrame, shape: tuple[int, int] | None = None) -> np.ndarray:
    """int32 label image of the scene: row ``i`` gets id ``i + 1`` (as ``label_id``), 0 is none.

    Where masks overlap the higher score wins; among equal scores the earlier row (as
    :func:`~napari_sam3.gis.masks_to_labels`).
    """
    _check_scene_masks(df)
    if shape is None:
        if not len(df):
            raise ValueError("the DataFrame is empty, so the scene's shape is unknown; pass shape=")
        shape = df["mask"].iloc[0].shape
    labels = np.zeros(tuple(shape), dtype=np.int32)
    n = len(df)
    scores = pd.to_numeric(df["score"], errors="coerce").to_numpy(np.float64)
    scores = np.where(np.isnan(scores), -np.inf, scores)
    masks = df["mask"].tolist()
    for i in np.lexsort((-np.arange(n), scores)).tolist():  # the last painted wins
        r0, c0, pixels = masks[i].crop()
        labels[r0 : r0 + pixels.shape[0], c0 : c0 + pixels.shape[1]][pixels] = i + 1
    return labels


def write_scene(
    df: pd.DataFrame,
    path: PathLike,
    raster: PathLike | Sequence[PathLike] | RasterInfo | None = None,
    overwrite: bool = False,
    simplify: float = 0.0,
) -> Path:
    """Write a :func:`segment_scene` result, atomically, by the file's extension.

    ``.gpkg`` / ``.geojson``: polygons (:func:`scene_geodataframe`, then
    :func:`~napari_sam3.gis.write_vector`). ``.tif`` / ``.tiff``: an int32 label GeoTIFF on the
    source's grid (:func:`scene_labels`, then :func:`~napari_sam3.gis.write_labels_geotiff`;
    the label image takes rows x cols x 4 bytes). An existing file is refused unless
    ``overwrite``.
    """
    from .gis import VECTOR_FORMATS, write_labels_geotiff, write_vector

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in VECTOR_FORMATS:
        return write_vector(scene_geodataframe(df, raster, simplify), path, overwrite=overwrite)
    if suffix in (".tif", ".tiff"):
        info = _scene_info(df, raster)
        labels = scene_labels(df, (info.rows, info.cols))
        with rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_BYTES):
            return write_labels_geotiff(labels, path, info, overwrite=overwrite)
    raise ValueError(
        f"cannot write {path.name!r}: use .gpkg or .geojson (polygons) or .tif (label raster)"
    )

"""Running a scene's tiles through the client: read ahead, stretch once, one vision pass a tile."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import rasterio
from dask.utils import format_bytes

from napari_sam3.client.results import empty_result
from napari_sam3.client.sam3 import run_query
from napari_sam3.core import validate
from napari_sam3.core.columns import SCENE_COLUMNS
from napari_sam3.core.errors import InvalidInput, InvalidType
from napari_sam3.imagery.raster import (
    BandKey,
    RasterInfo,
    keep_remote_open,
    pixel_metres,
    raster_info,
    read_raster,
)
from napari_sam3.imagery.remote import file_name
from napari_sam3.imagery.stac import scene_source
from napari_sam3.imagery.stretch import channels_rgb, select_channels
from napari_sam3.masks.protocol import frame_masks, tight_crop
from napari_sam3.prompts.query import Query
from napari_sam3.runtime.cached import heads_bytes, image_bytes
from napari_sam3.scene.aoi import aoi_window, tiles_touching
from napari_sam3.scene.budget import ScenePlan, resolve_budget
from napari_sam3.scene.guard import TileGuard
from napari_sam3.scene.journal import TileJournal, run_identity
from napari_sam3.scene.masks import SceneMask
from napari_sam3.scene.merge import Detection, dedup_across_tiles, merge_seams
from napari_sam3.scene.settings import FIELDS as SETTINGS_FIELDS
from napari_sam3.scene.settings import SceneSettings
from napari_sam3.scene.tiles import GDAL_CACHE_BYTES, Tile, tile_grid
from napari_sam3.scene.view import SceneView, as_read, scene_view

__all__ = ["PHASES", "default_in_flight", "segment_scene"]

PathLike = str | os.PathLike
Source = PathLike | Sequence[PathLike]
Progress = bool | Callable[[int, int], Any] | None

PHASES = ("read", "stretch", "model", "wait", "merge")
# Tiles read and stretched ahead of the model (each one tile of image in memory).
_READ_AHEAD = 2


def segment_scene(
    client: Any,
    source: Source,
    query: Query | str | None = None,
    settings: SceneSettings | None = None,
    *,
    progress: Progress = True,
    journal: PathLike | None = None,
    resume: bool = False,
    **options: Any,
) -> pd.DataFrame:
    """Segment a whole raster tile by tile; one row per object, in scene pixels.

    Args:
        client: a :class:`~napari_sam3.client.sam3.Sam3Client` (local or Triton).
        source: a raster file or ``http(s)://`` URL, a list of single-band files to stack (as
            ``read_raster``), or a STAC item (a ``.json`` path or URL, or a pystac Item; its RGB
            assets, :func:`~napari_sam3.imagery.stac.item_bands`).
        query: a :class:`~napari_sam3.prompts.query.Query` (what to look for and the
            thresholds), or one keyword; all keywords and concepts share one vision pass per
            tile, and vector exemplars are encoded on the tiles they fall in first
            (:func:`~napari_sam3.scene.driver.with_exemplar_concepts`).
        settings: a :class:`~napari_sam3.scene.settings.SceneSettings` (tiles, bands, nodata,
            gsd, aoi, ...; each described below).
        options: instead of ``query``/``settings`` (or to change one setting of ``settings``),
            their fields as keywords: ``prompt`` (a word), ``keywords`` (a list), ``concept``
            (a Concept, a concept ``.npz`` file, or a list of them), ``score_thr``, ...,
            ``tile_size``, ``overlap``, ...
        tile_size: tile side in scene pixels; default the model's input size ``client.image_size``
            (no resampling). Larger tiles are downsampled by the client's letterbox.
        overlap: pixels shared by neighbouring tiles (0 .. tile_size // 2); default tile_size // 8.
        bands: the 1 or 3 bands to use (1-based or names), needed for more than 3 bands.
        stats: stretch limits; default one :func:`~napari_sam3.imagery.stretch.scene_stretch` of the
            whole scene (uint8 scenes are used as they are).
        nodata: nodata value; default the raster's own.
        (query) score_thr, mask_thr, max_det, dedup: as for ``client.segment``, per tile;
            ``dedup`` also removes duplicates across tiles (None keeps them all).
        seam_iou: how well two pieces must agree where their tiles overlap to be joined.
        progress: True for a tqdm bar, False/None for none, or ``callable(done, total)`` called
            after every tile (e.g. to drive napari's progress, or to cancel by raising).
        in_flight: model requests running at once (tiles read ahead: 2 more); default
            :func:`default_in_flight` (a server pool's capacity, 1 for the embedded engine). The
            detections do not depend on it: results are merged in tile order.
        aoi: an area of interest (:mod:`napari_sam3.scene.aoi`: a bbox in EPSG:4326, a
            :class:`~napari_sam3.scene.aoi.Bbox`, a vector file or GeoDataFrame): only the tiles
            that touch it are read and segmented, and the stretch is computed over them.
        gsd: metres on the ground per model pixel: the scene is tiled on the resampled grid of
            :func:`~napari_sam3.imagery.raster.ground_grid` (tile size, overlap and seams in its
            pixels); masks are in that grid, whose exact georeferencing ``df.attrs["scene"]``
            holds, so polygons come out in the raster's CRS.
        assets: the STAC item's assets to use (1 RGB asset or 3 bands), instead of its RGB ones.
        memory_budget: the memory the run may take beyond the engine itself (bytes, or a size such as
            ``"1.5GB"``): tiles in flight, queries per request and the caches are planned within
            it (:mod:`napari_sam3.scene.budget`); default a quarter of the memory available, at
            most 1.5 GiB. It never changes the detections.
        journal: a folder where every finished tile is recorded as it finishes
            (:mod:`napari_sam3.scene.journal`), so that a run that is killed can resume;
            :func:`~napari_sam3.scene.driver.segment_to_file` keeps one beside its output.
            Without ``resume`` a journal already there is replaced.
        resume: take the tiles ``journal`` holds from an earlier run of the same query,
            settings, model and raster instead of running them again (one of another run is
            refused, naming what differs); the result is the uninterrupted run's.

    Returns:
        Columns ``box`` (float32 x1, y1, x2, y2 in scene pixels), ``score``, ``mask``
        (:class:`SceneMask`), ``keyword``, ``prompt_kind``, ``tile`` (index into
        ``df.attrs["tiles"]``), ``merged`` (pieces joined across seams), ``source`` (file name),
        ``gsd`` (metres per pixel of the grid tiled: ``gsd``, else the raster's own; NaN
        without a projected CRS); best score first. ``df.attrs`` holds ``scene`` (shape, CRS,
        transform, gsd), ``tiles`` (the whole grid), ``tiles_run`` (those segmented), ``aoi``
        (the AOI's window, or None), ``memory`` (the budget and how it was used:
        ``ScenePlan.report``), ``skipped_tiles`` (all nodata), ``resumed_tiles`` (taken from the
        journal) and ``timings`` (seconds per phase: read, stretch
        (the scene's statistics, ``scene_stats``, and every tile's stretch and letterbox),
        model (seconds the requests took, summed over the requests in flight), wait (this
        thread waiting for the model), merge; journal (with ``journal``: seconds writing the
        tile records, in a thread beside the run); wall; and ``peak_in_flight``).
    """
    wall0 = time.perf_counter()
    if resume and journal is None:
        raise InvalidInput("resume=True takes the tiles of a journal: give journal= (a folder)")
    query, settings = query_and_settings(query, settings, options)
    query.check_model(client.model_id)
    source = scene_source(source, settings.assets)
    if query.exemplars is not None:
        from napari_sam3.scene.driver import with_exemplar_concepts

        query = with_exemplar_concepts(client, query, [source], settings)
    gsd = settings.gsd
    info, tiles, run, window = tile_plan(client, source, settings)
    timings = dict.fromkeys(PHASES, 0.0)
    in_flight = default_in_flight(client) if settings.in_flight is None else settings.in_flight
    budget = resolve_budget(settings.memory_budget)
    plan = scene_plan(client, budget, query.count, in_flight, tiles, info)
    grid = _Grid(gsd, _covering(run) if window is not None else None)
    book = None
    if journal is not None:
        identity = run_identity(client.model_id, query, settings, source, info)
        book = TileJournal.open(journal, identity, resume)
    resumed = {t.index: book.finished[t.index] for t in run if book and t.index in book.finished}

    # no raw heads or answers kept to re-filter tiles; features as far as the budget leaves room
    with (
        rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_BYTES),
        keep_remote_open(),
        client.cache_limits(plan.feature_cache(), heads_bytes=0, results_bytes=0),
    ):
        try:
            found, view = _run_tiles(
                client, source, info, run, query, settings, progress, timings, plan, grid,
                done=resumed, record=None if book is None else book.add,
            )  # fmt: skip
        except BaseException:
            if book is not None:
                book.close(quiet=True)  # what finished is kept; the run's error goes on
            raise
        if book is not None:
            book.close()
            timings["journal"] = book.seconds

    t0 = time.perf_counter()
    # in tile order, the journaled tiles among the new: as the uninterrupted run has them
    detections = [d for t in run for d in found[t.index] or ()]
    skipped = sum(found[t.index] is None for t in run)
    detections = merge_seams(detections, tiles, settings.seam_iou)
    if query.dedup is not None:
        detections = dedup_across_tiles(detections, query.dedup)
    frame = _frame(detections, _source_name(info.path), ground_size(info, gsd))
    timings["merge"] += time.perf_counter() - t0
    timings["wall"] = time.perf_counter() - wall0
    frame.attrs.update(
        scene={
            "path": info.path,
            "shape": (info.rows, info.cols),
            "crs": None if info.crs is None else info.crs.to_string(),
            "transform": tuple(info.transform)[:6],
            "gsd": gsd,
        },
        tiles=tiles,
        tiles_run=[t.index for t in run],
        aoi=window,
        memory=plan.report(),
        skipped_tiles=skipped,
        resumed_tiles=len(resumed),
        view=view,
        query=query,
        timings=timings,
    )
    return frame


def query_and_settings(
    query: Query | str | None, settings: SceneSettings | None, options: dict[str, Any]
) -> tuple[Query, SceneSettings]:
    """segment_scene's query and settings from its arguments: a Query or one keyword, a
    SceneSettings, and the keywords of either (``prompt``, ``keywords``, ``concept`` and the
    Query's fields; the SceneSettings' fields)."""
    asked = {k: v for k, v in options.items() if k in _QUERY_OPTIONS}
    scene = {k: v for k, v in options.items() if k in SETTINGS_FIELDS}
    unknown = sorted(set(options) - set(asked) - set(scene))
    if unknown:
        raise InvalidType(
            f"segment_scene got unknown options {unknown}; a Query takes "
            f"{sorted(_QUERY_OPTIONS)}, SceneSettings {sorted(SETTINGS_FIELDS)}"
        )
    if isinstance(query, Query):
        if asked:
            raise InvalidType(
                f"{sorted(asked)} given beside a Query: put them in the Query (query.replace(...))"
            )
    elif query is None:
        query = Query.of(**asked)
    elif isinstance(query, str):
        if "prompt" in asked:
            raise InvalidType("give the keyword once: as query or as prompt=")
        query = Query.of(prompt=query, **asked)
    else:
        raise InvalidType(f"query must be a Query or a keyword, got {type(query).__name__}")
    if settings is None:
        settings = SceneSettings(**scene)
    elif not isinstance(settings, SceneSettings):
        raise InvalidType(f"settings must be a SceneSettings, got {type(settings).__name__}")
    elif scene:
        settings = settings.replace(**scene)
    return query, settings


_QUERY_OPTIONS = frozenset(
    {"prompt", "keywords", "concept"} | {f.name for f in dataclasses.fields(Query)}
) - {"concept_files"}


@dataclass(frozen=True)
class _Grid:
    """How tiles are read: on the ``gsd`` grid (None: the raster's own); the stretch computed
    over ``region`` (r0, c0, r1, c1; None: the whole scene)."""

    gsd: float | None = None
    region: tuple[int, int, int, int] | None = None


def _covering(tiles: list[Tile]) -> tuple[int, int, int, int]:
    """The window spanning ``tiles``."""
    return (
        min(t.row for t in tiles),
        min(t.col for t in tiles),
        max(t.row + t.height for t in tiles),
        max(t.col + t.width for t in tiles),
    )


def ground_size(info: RasterInfo, gsd: float | None) -> float:
    """Metres on the ground per pixel of ``info``'s grid: ``gsd``, else the raster's own pixel
    width in metres; NaN where the CRS is missing or not projected."""
    return float(gsd) if gsd is not None else pixel_metres(info)


def scene_tiles(
    client: Any, info: RasterInfo, tile_size: int | None, overlap: int | None
) -> list[Tile]:
    """The scene's tile grid: `tile_size` (default the model's input size) checked, `overlap`
    (default a eighth of it)."""
    size = int(client.image_size) if tile_size is None else tile_size
    size = validate.integer("tile_size (pixels)", size, 8)
    overlap = size // 8 if overlap is None else overlap
    return tile_grid(info.rows, info.cols, int(size), overlap)


class TilePlan(NamedTuple):
    """Which tiles of a scene run: the raster as tiled (on the ``gsd`` grid), the whole grid,
    the tiles that run (those touching the AOI) and the AOI's window (None: the whole scene)."""

    info: RasterInfo
    tiles: list[Tile]
    run: list[Tile]
    window: Any


def tile_plan(client: Any, source: Source, settings: SceneSettings) -> TilePlan:
    """The tiles a run of ``settings`` on ``source`` segments, with the scene's own defaults
    (what the napari Scene tab counts before it starts)."""
    info = raster_info(source, gsd=settings.gsd)
    validate.image_side(info.rows, info.cols, f"raster {_source_name(info.path)}")
    tiles = scene_tiles(client, info, settings.tile_size, settings.overlap)
    window = None if settings.aoi is None else aoi_window(settings.aoi, info)
    return TilePlan(info, tiles, tiles if window is None else tiles_touching(tiles, window), window)


def read_tile(
    client: Any,
    source: Source,
    tile: Tile,
    bands: Sequence[BandKey] | None,
    view: SceneView,
    gsd: float | None = None,
) -> tuple[Any, np.ndarray | None, float, float]:
    """One tile as the model sees it, read with the scene's decisions: (PreparedImage, or None
    where the tile has no valid pixel; its invalid pixels or None; seconds reading; seconds
    stretching). Invalid pixels reach the model as 0. ``gsd``: the tile is a window of that
    grid (:func:`~napari_sam3.imagery.raster.ground_grid`)."""
    t0 = time.perf_counter()
    raster = read_raster(source, bands=bands, window=tile.slices, gsd=gsd)
    t1 = time.perf_counter()
    chosen = as_read(bands, raster.shape[0])
    channels = select_channels(raster, chosen, view.tile_nodata)
    if channels.invalid is not None and channels.invalid.all():
        return None, channels.invalid, t1 - t0, time.perf_counter() - t1
    rgb = channels_rgb(channels, view.stats)
    return client.prepare(rgb), channels.invalid, t1 - t0, time.perf_counter() - t1


def scene_plan(
    client: Any, budget: int, queries: int, in_flight: int, tiles: list[Tile], info: RasterInfo
) -> ScenePlan:
    """The run's memory plan: what one tile and one query take in this process (the features
    and raw head outputs only where the model runs here, the embedded engine)."""
    here = client.engine.local
    sizes = client.manifest.sizes if here else None
    cache = client.cache_info()["features"]["max_bytes"] if here else 0
    side = max(max(t.height, t.width) for t in tiles) if tiles else int(client.image_size)
    pixels = side * side + 3 * int(client.image_size) ** 2  # bands as read, and the model input
    return ScenePlan(
        budget=budget,
        features=image_bytes(sizes) if here else 0,
        query=heads_bytes(sizes) if here else 0,
        tile=pixels * (info.count * info.dtype.itemsize + 2),
        queries=queries,
        per_request=int(client.manifest.max_keywords),
        requested=in_flight,
        cache=cache,
    )


def default_in_flight(client: Any) -> int:
    """Requests in flight by default: what the engine says it serves at once (a server pool: its
    servers' instances, plus one queued each), else 1 (the embedded engine runs one at a time)."""
    return max(1, int(client.engine.concurrency()))


def _run_tiles(
    client: Any,
    source: Source,
    info: RasterInfo,
    tiles: list[Tile],
    query: Query,
    settings: SceneSettings,
    progress: Progress,
    timings: dict[str, float],
    plan: ScenePlan,
    grid: _Grid | None = None,
    done: dict[int, list[Detection] | None] | None = None,
    record: Callable[[int, list[Detection] | None], None] | None = None,
) -> tuple[dict[int, list[Detection] | None], SceneView]:
    """Every tile through the model: (each tile's detections in scene pixels, None for a tile
    with no valid pixel; what the model was given). The tiles ``done`` holds (a journal's) are
    taken as they are; each other tile is given to ``record`` as it finishes.

    Three stages: one thread reads and stretches tiles in order (at most ``_READ_AHEAD`` ready
    before the model takes them); up to ``plan.requested`` threads run the model, as many at
    once as ``plan.in_flight()`` allows; this thread collects the results **in tile order**, so
    the detections are exactly the serial run's. At most ``plan.requested + _READ_AHEAD + 1`` tiles
    are held at once.
    """
    grid = grid or _Grid()
    t0 = time.perf_counter()
    bands = settings.bands
    view = scene_view(source, info, bands, settings.nodata, grid.gsd, grid.region, settings.stats)
    timings["scene_stats"] = time.perf_counter() - t0
    timings["stretch"] += timings["scene_stats"]

    def load(tile: Tile) -> tuple[Any, np.ndarray | None, float, float]:
        return read_tile(client, source, tile, bands, view, grid.gsd)

    def infer(prepared: Any, limit: int) -> tuple[pd.DataFrame, float]:
        t0 = time.perf_counter()
        return run_query(client, prepared, query, limit), time.perf_counter() - t0

    report = _progress(progress, len(tiles), _source_name(info.path))
    found: dict[int, list[Detection] | None] = dict(done or {})
    for dets in found.values():  # what the journal gave is held as what is found
        plan.observe([], sum(d.mask.nbytes for d in dets or ()))
    guard = TileGuard(client, _source_name(info.path), len(tiles))  # one model; how far it came
    loads: deque[Future] = deque()
    running: deque[tuple[Tile, np.ndarray | None, Future | None]] = deque()
    stats_lock = threading.Lock()
    timings["peak_in_flight"] = 0
    warned = False
    try:
        with (
            ThreadPoolExecutor(1, thread_name_prefix="sam3-read") as reader,
            ThreadPoolExecutor(plan.requested, thread_name_prefix="sam3-infer") as model,
        ):
            upcoming = iter([t for t in tiles if t.index not in found])
            finished = len(found)
            if finished:
                report(finished)

            def read_ahead() -> None:
                while len(loads) < _READ_AHEAD:
                    tile = next(upcoming, None)
                    if tile is None:
                        return
                    loads.append((tile, reader.submit(load, tile)))

            read_ahead()
            while loads or running:
                # Fill the model's slots with tiles as they are read.
                while (
                    loads
                    and sum(f is not None for _, _, f in running) < plan.in_flight()
                    and len(running) < plan.in_flight() + _READ_AHEAD
                ):
                    tile, future = loads.popleft()
                    prepared, invalid, t_read, t_stretch = future.result()
                    read_ahead()
                    with stats_lock:
                        timings["read"] += t_read
                        timings["stretch"] += t_stretch
                    limit = plan.request_size()
                    job = None if prepared is None else model.submit(infer, prepared, limit)
                    running.append((tile, None if job is None else invalid, job))
                    busy = sum(f is not None for _, _, f in running)
                    timings["peak_in_flight"] = max(timings["peak_in_flight"], busy)
                    if running[0][2] is None or running[0][2].done():
                        break
                tile, invalid, job = running.popleft()
                if job is None:
                    found[tile.index] = None
                else:
                    t0 = time.perf_counter()
                    frame, seconds = job.result()
                    t1 = time.perf_counter()
                    dets = found[tile.index] = _tile_detections(frame, tile, invalid, info)
                    plan.observe(
                        [size // count for count, size in frame.attrs["requests"]],
                        sum(d.mask.nbytes for d in dets),
                    )
                    if plan.features:  # the cache takes what the work leaves of the budget
                        client.engine.cache_bounds(features=plan.feature_cache())
                    del frame, job  # a tile's answers (all its candidates' runs) go now
                    if plan.over_budget() and not warned:
                        warned = True
                        warnings.warn(
                            f"the objects found so far take {format_bytes(plan.held)}, more "
                            f"than the memory budget ({format_bytes(plan.budget)}); they are "
                            "all kept. Raise score_thr, lower max_det, segment an area of "
                            "interest, or raise the budget",
                            stacklevel=2,
                        )
                    timings["wait"] += t1 - t0
                    timings["model"] += seconds
                    timings["merge"] += time.perf_counter() - t1
                finished += 1
                guard.tile_done(finished)  # before the journal: never a tile of another model
                if record is not None:
                    record(tile.index, found[tile.index])
                report(finished)
    except BaseException as error:
        for _, future in loads:
            future.cancel()
        for _, _, job in running:
            if job is not None:
                job.cancel()
        noted = guard.stopped(error)
        if noted is not None:
            raise noted from error
        raise
    finally:
        report(None)

    return found, view


def _tile_detections(
    frame: pd.DataFrame, tile: Tile, invalid: np.ndarray | None, info: RasterInfo
) -> list[Detection]:
    """A tile's result rows -> detections in scene pixels (nodata pixels removed)."""
    if not len(frame):
        return []
    out = []
    r0, c0, r1, c1 = tile.bounds
    edges = (r0 > 0, c0 > 0, r1 < info.rows, c1 < info.cols)  # top, left, bottom, right
    shift = np.array([c0, r0, c0, r0], dtype=np.float32)
    masks, _ = frame_masks(frame["mask"], (tile.height, tile.width), "segment_scene")
    for mask, row in zip(masks, frame.itertuples(index=False), strict=True):
        cr, cc, pixels = mask.crop()
        area = int(np.count_nonzero(pixels))
        if area == 0:
            continue
        if invalid is not None:
            bad = invalid[cr : cr + pixels.shape[0], cc : cc + pixels.shape[1]]
            lost = int(np.count_nonzero(pixels & bad))
            if 2 * lost > area:
                continue
            if lost:
                cr, cc, pixels = tight_crop(cr, cc, pixels & ~bad)
        scene_mask = SceneMask.from_crop(pixels, r0 + cr, c0 + cc, (info.rows, info.cols))
        x1, y1, x2, y2 = scene_mask.bbox
        touches = (y1 == r0, x1 == c0, y2 == r1, x2 == c1)
        out.append(
            Detection(
                mask=scene_mask,
                box=np.asarray(row.box, dtype=np.float32) + shift,
                score=float(row.score),
                keyword=str(row.keyword),
                prompt_kind=str(row.prompt_kind),
                tile=tile.index,
                cut=any(e and t for e, t in zip(edges, touches, strict=True)),
            )
        )
    return out


def _frame(dets: list[Detection], source: str, gsd: float) -> pd.DataFrame:
    if not dets:
        extra = {"tile": np.int64, "merged": np.int64, "source": object, "gsd": np.float64}
        return empty_result(extra)[SCENE_COLUMNS]
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
            "gsd": np.float64(gsd),
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
    raise InvalidType(f"progress must be True, False or a callable(done, total), got {progress!r}")


def _source_name(path: Any) -> str:
    if isinstance(path, tuple):
        return "+".join(file_name(p) for p in path)
    return file_name(path)

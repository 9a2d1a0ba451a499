"""One scene across a dask cluster: each tile a task, the merge and the writing here.

``segment_scene(client, source, query, settings, cluster=SceneCluster(spec, dask_client))`` reads
the scene's header, its statistics and its tile plan here, then sends every tile to the cluster:
a worker reads its tile itself (a local path, or a COG by range requests with the same GDAL
options, :mod:`napari_sam3.imagery.remote`), stretches it with the scene's decisions
(:class:`~napari_sam3.scene.view.SceneView`, computed once here), runs the query on its own
client and returns the tile's detections. Each worker process makes its client once per
:class:`~napari_sam3.client.connection.ConnectionSpec` (:func:`worker_client`) and keeps it, with
its feature cache, for every later tile and scene. The seams are joined, duplicates removed and
the output written in this process, in tile order, so the result is the serial run's.

A tile that fails stops the scene: the other tasks are cancelled and a :class:`RunFailed` names
the tile; nothing is written (a journal keeps the tiles that finished, for ``resume``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import rasterio

from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.client.sam3 import run_query
from napari_sam3.core.errors import ConnectionFailed, InvalidInput, InvalidType, RunFailed
from napari_sam3.imagery.raster import keep_remote_open
from napari_sam3.scene.budget import resolve_budget
from napari_sam3.scene.merge import Detection
from napari_sam3.scene.tiles import GDAL_CACHE_BYTES, Tile

__all__ = ["SceneCluster", "dask_client", "worker_client"]

_clients: dict[ConnectionSpec, Any] = {}
_clients_lock = threading.Lock()


def worker_client(spec: ConnectionSpec) -> Any:
    """This process's client for ``spec``, made on first use and kept (one per worker process:
    its engine and feature cache serve every tile and scene it is given)."""
    with _clients_lock:
        if spec not in _clients:
            _clients[spec] = spec.connect()
        return _clients[spec]


@dataclass(frozen=True)
class SceneCluster:
    """Where a scene's tiles run: ``dask``, a ``distributed.Client`` (of a ``LocalCluster`` or a
    running scheduler), and ``spec``, what each worker connects to the model with (the same
    model as the caller's client)."""

    dask: Any
    spec: ConnectionSpec

    def __post_init__(self) -> None:
        if not isinstance(self.spec, ConnectionSpec):
            raise InvalidType(
                "SceneCluster.spec must be a napari_sam3.client.connection.ConnectionSpec "
                f"(every worker connects with it), got {type(self.spec).__name__}"
            )
        if not hasattr(self.dask, "submit"):
            raise InvalidType(
                "SceneCluster.dask must be a distributed.Client, got " + type(self.dask).__name__
            )


@contextlib.contextmanager
def dask_client(
    workers: int | None = None, scheduler: str | None = None, timeout: float = 5.0
) -> Iterator[Any]:
    """A ``distributed.Client`` for the block: of a ``LocalCluster`` of ``workers`` processes
    (one thread each; they ignore a terminal's Ctrl-C, which reaches this process alone), or
    of the running ``scheduler``."""
    from distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            try:
                client = stack.enter_context(Client(scheduler, timeout=timeout))
            except (OSError, TimeoutError) as error:
                raise ConnectionFailed(
                    f"no dask scheduler answers at {scheduler} within {timeout:g} s "
                    f"({error}); start one (`dask scheduler`) or check the address"
                ) from None
        else:
            with _ctrl_c_ignored_by_children():
                cluster = stack.enter_context(
                    LocalCluster(
                        n_workers=int(workers or 1),
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=logging.CRITICAL,  # failures are reported by the run
                    )
                )
            client = stack.enter_context(Client(cluster))
        yield client


@contextlib.contextmanager
def _ctrl_c_ignored_by_children() -> Iterator[None]:
    """Worker processes started in the block ignore SIGINT (the ignored disposition survives
    their exec): a Ctrl-C at the terminal, sent to the whole process group, reaches this
    process alone, which stops the workers between tiles."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# ----------------------------------------------------------------------------- tiles as tasks


@dataclass(frozen=True)
class TileJob:
    """What a worker needs for every tile of one scene (picklable; no credentials: a worker
    reads remote files with its own environment's)."""

    spec: ConnectionSpec
    model_id: str
    source: Any
    info: Any
    query: Any
    bands: Any
    view: Any
    gsd: float | None
    memory_budget: Any


def segment_tile(job: TileJob, tile: Tile) -> tuple[list[Detection] | None, dict[str, float]]:
    """One tile on this worker's client: its detections in scene pixels (None: no valid pixel)
    and the seconds it took (read, stretch, model). The worker's memory budget bounds its
    feature cache as a serial run's does."""
    from napari_sam3.scene.run import _tile_detections, read_tile, scene_plan

    client = worker_client(job.spec)
    if client.model_id != job.model_id:
        raise InvalidInput(
            f"the worker's model ({client.model_id}) is not the caller's ({job.model_id}): give "
            "the cluster the ConnectionSpec of the client that runs the scene"
        )
    budget = resolve_budget(job.memory_budget)
    plan = scene_plan(client, budget, job.query.count, 1, [tile], job.info)
    with (
        rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_BYTES),
        keep_remote_open(),
        client.cache_limits(plan.feature_cache(), heads_bytes=0, results_bytes=0),
    ):
        prepared, invalid, t_read, t_stretch = read_tile(
            client, job.source, tile, job.bands, job.view, job.gsd
        )
        seconds = {"read": t_read, "stretch": t_stretch, "model": 0.0}
        if prepared is None:
            return None, seconds
        t0 = time.perf_counter()
        frame = run_query(client, prepared, job.query, plan.request_size())
        seconds["model"] = time.perf_counter() - t0
        return _tile_detections(frame, tile, invalid, job.info), seconds


def run_tiles_on_cluster(
    cluster: SceneCluster,
    job: TileJob,
    tiles: list[Tile],
    found: dict[int, list[Detection] | None],
    name: str,
    report: Callable[[int | None], None],
    timings: dict[str, float],
    record: Callable[[int, list[Detection] | None], None] | None = None,
) -> dict[int, list[Detection] | None]:
    """Every tile of ``tiles`` not in ``found`` as a task; ``found`` filled as they finish
    (each given to ``record``, e.g. the journal). A failed tile cancels the rest and raises
    :class:`RunFailed`; an exception from ``report`` (a cancel) cancels them and goes on."""
    from distributed import as_completed

    dask = cluster.dask
    stamp = f"{time.time_ns()}"
    shared = dask.scatter(job, broadcast=True, hash=False)  # once per worker, not per tile
    futures = {
        dask.submit(
            segment_tile, shared, tile, key=f"sam3-tile-{tile.index}-{stamp}", pure=False
        ): tile
        for tile in tiles
        if tile.index not in found
    }
    finished = len(found)
    if finished:
        report(finished)
    timings["peak_in_flight"] = min(len(futures), _worker_threads(dask))
    try:
        for future in as_completed(futures):
            tile = futures[future]
            try:
                dets, seconds = future.result()
            except Exception as error:
                raise RunFailed(
                    f"tile {tile.index} of {name} failed on a worker "
                    f"({type(error).__name__}: {error}); the scene was stopped and nothing was "
                    "written"
                ) from None
            for phase, value in seconds.items():
                timings[phase] += value
            found[tile.index] = dets
            if record is not None:
                record(tile.index, dets)
            finished += 1
            report(finished)
    except BaseException:
        dask.cancel(list(futures))
        raise
    finally:
        del shared
    return found


def _worker_threads(dask: Any) -> int:
    try:
        return max(1, sum(dask.nthreads().values()))
    except Exception:  # noqa: BLE001 - only a figure for the timings
        return 1

"""Scene: a whole raster, tile by tile (`napari_sam3.scene.segment_scene`) -> a new labels layer.

The tiles are read lazily from the file the image layer was opened from (its ``source``
metadata), or from a file chosen here, so a scene far larger than memory can be segmented. The
progress bar counts tiles; Cancel stops the run after the tile being segmented. "GSD (m)" is
`segment_scene`'s ``gsd``; the selected region (Where: Selected region in the SAM3 panel, the
Region layer in this widget on its own) is its ``aoi``: only the tiles touching it run.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from magicgui.widgets import FileEdit, LineEdit, PushButton

from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.bands import parse_bands
from napari_sam3.plugin.georef import affine_list, crop_metadata, transform_kwargs
from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import (
    Sam3Widget,
    number,
    reports_errors,
)
from napari_sam3.plugin.widgets._fields import (
    REGION,
    WHOLE,
    add_image_fields,
    add_threshold_fields,
    query,
)
from napari_sam3.prompts.keywords import parse_keywords

SUFFIXES = ".tif .tiff .jp2 .j2k"


TIPS = {  # the number fields' tooltips
    "tile_size": "Tile side in scene pixels; 0 = the model's input size",
    "overlap": "Pixels shared by neighbouring tiles; -1 = tile size / 8",
    "gsd": "Ground sample distance: each tile is resampled so that one model pixel covers this "
    "many metres on the ground (smaller than the raster's = upsampled, for small objects; "
    "larger = downsampled, for large ones); tile size and overlap are in those pixels. "
    "0 = the raster's native resolution",
    "memory": "Memory the run may take beyond the model itself: tiles in flight, prompts per "
    "request and caches are planned within it (the objects found do not change). "
    "0 = a quarter of the available memory, at most 1.5 GiB",
}


class SceneCancelled(Exception):
    """Raised from the progress callback to stop `segment_scene` when the analyst cancels."""


def layer_source(layer) -> str | list[str]:
    """The raster file (or band files) an image layer was read from by the plugin's reader."""
    source = (getattr(layer, "metadata", None) or {}).get("source")
    if not source:
        raise InvalidInput(
            f"{layer.name} was not opened from a raster file by this plugin: "
            "open the file with napari-sam3's reader, or choose it under 'Scene file'"
        )
    return source


def default_bands(layer, text: str) -> list | None:
    """The bands typed in the widget; else, for a raster of more than 3 bands, the layer's RGB."""
    keys = parse_bands(text)
    if keys or layer is None:
        return keys
    metadata = layer.metadata or {}
    names = metadata.get("band_names") or []
    rgb = _layers._record(layer).get("rgb_bands")
    return list(rgb) if len(names) > 3 and rgb else None


def region_aoi(region, layer, source):
    """The area of interest of a scene run: the box of the raster's map coordinates under the
    last shape of the Shapes layer `region`, drawn over the image `layer` read from `source`."""
    from rasterio.windows import Window, bounds

    from napari_sam3.imagery.raster import raster_info
    from napari_sam3.scene.aoi import Bbox

    if layer is None:
        raise InvalidInput(
            "a selected region limits a scene run on the image layer it is drawn over: choose "
            f"that layer instead of a scene file, or Where: {WHOLE}"
        )
    info = raster_info(source)
    if info.crs is None:
        raise InvalidInput(
            f"{layer.name} has no CRS, so a scene run cannot be limited to a region of it: "
            f"choose Where: {WHOLE}"
        )
    r0, r1, c0, c1 = _layers.region_window(region, layer)
    box = bounds(Window(c0, r0, c1 - c0, r1 - r0), info.transform)
    return Bbox(*box, crs=info.crs.to_string())


def tile_work(run, cancel: threading.Event, *args, **kwargs):
    """Generator for a widget's job: runs ``run(*args, progress=..., **kwargs)`` (a library call
    that reports tiles) in a thread of its own, yields each (tiles done, tiles) it reports and
    returns its result; the progress callback raises `SceneCancelled` once `cancel` is set, and
    closing the generator sets it (the run stops at the next tile)."""
    updates: queue.Queue = queue.Queue()

    def progress(done: int, total: int) -> None:
        if cancel.is_set():
            raise SceneCancelled("cancelled")
        updates.put((done, total))

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(run, *args, progress=progress, **kwargs)
        try:
            while not (future.done() and updates.empty()):
                try:
                    yield updates.get(timeout=0.05)
                except queue.Empty:
                    pass
        finally:
            if not future.done():
                cancel.set()
        return future.result()


def scene_work(client, source, cancel: threading.Event, tiles: int, query, settings):
    """Generator for the Scene widget's job: (0, tiles) first, then `segment_scene`'s tiles
    (`tile_work`); returns the DataFrame."""
    from napari_sam3.scene import segment_scene

    yield (0, tiles)
    return (yield from tile_work(segment_scene, cancel, client, source, query, settings))


class SceneWidget(Sam3Widget):
    """Segment a whole scene in overlapping tiles; all objects in one new labels layer."""

    def __init__(self, napari_viewer, shared=None) -> None:
        super().__init__(napari_viewer)
        if shared is None:
            add_image_fields(
                self,
                napari_viewer,
                nullable=True,
                image_tip="A layer opened from a raster file: its file is read tile by tile",
                region_tip="Optional: only the tiles touching the last rectangle of this Shapes "
                "layer are segmented",
            )
            own = [self.image, self.region]
        else:  # the SAM3 panel's image, bands and where / region
            self.image, self.bands, own = shared.image, shared.bands, []
            self.where, self.region = shared.where, shared.region
        self.file = FileEdit(
            mode="r",
            filter=" ".join(f"*{s}" for s in SUFFIXES.split()),
            label="Scene file",
            tooltip="Optional: a raster file to segment instead of the image layer's own",
        )
        self.prompt = LineEdit(
            value="",
            label="Prompt",
            tooltip="A text prompt, or keywords separated by commas or semicolons (one vision "
            "pass per tile)",
        )
        self.tile_size = number(0, (0, 100_000), "Tile size", TIPS["tile_size"])
        self.overlap = number(-1, (-1, 50_000), "Overlap", TIPS["overlap"])
        self.gsd = number(0.0, (0.0, 100_000.0), "GSD (m)", TIPS["gsd"], step=0.5)
        self.memory = number(0.0, (0.0, 4096.0), "Memory (GiB)", TIPS["memory"], step=0.5)
        self.run_button = PushButton(text="Segment scene")
        self.run_button.changed.connect(self.run)
        self._cancel_event = threading.Event()
        self.tiles = 0
        self.tiles_done = 0  # the last tile count the progress bar showed in a run
        self.progress.changed.connect(self._progress_changed)
        self.extend(
            [
                *own,
                self.file,
                *([self.bands] if shared is None else []),
                self.prompt,
                self.tile_size,
                self.overlap,
                self.gsd,
                self.memory,
                *add_threshold_fields(self, shared),
                self.run_button,
            ]
        )
        self._footer()
        self._controls = [self.run_button]
        self.reset_choices()

    def _source(self):
        """(source for segment_scene, the layer results are placed on or None)."""
        chosen = self.file.value
        if chosen is not None and str(chosen) not in ("", "."):
            if not Path(chosen).is_file():
                raise InvalidInput(f"no such file: {chosen}")
            return str(chosen), None
        layer = self.image.value
        if layer is None:
            raise InvalidInput("choose an image layer opened from a raster file, or a scene file")
        return layer_source(layer), layer

    def _aoi(self, source, layer):
        """The selected region as `segment_scene`'s ``aoi``, or None (the whole scene)."""
        where = getattr(self, "where", None)
        if where is not None and where.value != REGION:
            return None
        region = self.region.value
        if region is None:
            if where is None:
                return None
            raise InvalidInput(
                f"choose the Shapes layer whose last rectangle is the region, or Where: {WHOLE}"
            )
        return region_aoi(region, layer, source)

    def arguments(self) -> tuple:
        """(source, layer, Query, SceneSettings, tiles that will run) from the widget's fields;
        tile size and overlap left at 0 / -1 are the scene's own defaults."""
        from napari_sam3.imagery.raster import raster_info
        from napari_sam3.scene import SceneSettings
        from napari_sam3.scene.budget import resolve_budget
        from napari_sam3.scene.run import tile_plan

        client = self.client
        words = parse_keywords(self.prompt.value)
        if not words:
            raise InvalidInput("type a text prompt, or comma-separated keywords")
        wanted = query(self, keywords=words)
        source, layer = self._source()
        overlap = int(self.overlap.value)
        settings = SceneSettings(
            tile_size=int(self.tile_size.value) or None,
            overlap=None if overlap < 0 else overlap,
            bands=default_bands(layer, self.bands.value),
            gsd=float(self.gsd.value) or None,
            aoi=self._aoi(source, layer),
            memory_budget=resolve_budget(int(self.memory.value * 2**30) or None),
            # the stretch the layer is shown with, not a second one
            stats=None
            if layer is None
            else _layers.scene_stats(self.viewer, layer, self.bands.value),
        )
        if layer is not None:
            info = raster_info(source)
            if _layers.image_shape(layer) != (info.rows, info.cols):
                raise InvalidInput(
                    f"{layer.name} is {_layers.image_shape(layer)} pixels but its file is "
                    f"{info.rows}x{info.cols}: choose the scene file instead"
                )
        return source, layer, wanted, settings, len(tile_plan(client, source, settings).run)

    @reports_errors("Scene segment failed")
    def run(self, *_args) -> None:
        client = self.client
        source, layer, wanted, settings, tiles = self.arguments()
        self._cancel_event = cancel = threading.Event()
        self.tiles, self.tiles_done = tiles, 0
        words = ", ".join(wanted.keywords)
        self.job.start(
            f"Segmenting {tiles} tiles",
            scene_work,
            client,
            source,
            cancel,
            tiles,
            wanted,
            settings,
            done=lambda frame: self._show(frame, layer, f"SAM3 scene {words}", words),
        )

    def _progress_changed(self, *_args) -> None:
        if self.job.running and self.progress.max > 0:
            self.tiles_done = int(self.progress.value)

    def _job_cancelled(self) -> None:
        self._cancel_event.set()

    def _show(self, frame, layer, name: str, prompt: str) -> str:
        shape = tuple(frame.attrs["scene"]["shape"])
        path = frame.attrs["scene"]["path"]
        path = path[0] if isinstance(path, tuple | list) and path else path
        source = layer.name if layer is not None else Path(str(path)).name
        labels, features = _layers.results_to_labels(frame, shape, source)
        features["tile"] = np.asarray(frame["tile"], np.int64)
        tiles = len(frame.attrs.get("tiles_run", frame.attrs.get("tiles", ())))
        gsd = frame.attrs["scene"].get("gsd")
        record = {"prompt": prompt, "tiles": tiles, "gsd": gsd}
        if layer is not None and gsd is None:  # on the image layer's pixels and georeferencing
            target = _layers.ModelImage(
                None, layer, (0, 0), shape, crop_metadata(layer.metadata, 0, 0)
            )
            target.description = layer.name
            kwargs = _layers.result_layer_kwargs(target, name, features, **record)
        else:  # a file chosen here, or the GSD grid: placed by its own georeferencing, as the
            # reader places a raster
            if layer is not None:
                record["image_layer"] = layer.name
            kwargs = _file_layer_kwargs(frame.attrs["scene"], name, features, record)
        self.result = self.viewer.add_labels(labels, **kwargs)
        done = f"{len(frame)} object(s) in {tiles} tiles -> layer '{self.result.name}'"
        view = frame.attrs.get("view")
        if view is not None and view.placement is not None:
            from napari.utils.notifications import show_warning

            show_warning(view.placement)  # where its polygons land: said as loudly as an error
        return done if view is None else f"{done}; {view.summary()}"


def _file_layer_kwargs(scene: dict, name: str, features, record: dict) -> dict:
    from rasterio.transform import Affine

    transform = Affine(*scene["transform"])
    path = scene["path"]
    metadata = _layers.with_record(
        {
            "crs": scene["crs"],
            "transform": affine_list(transform),
            "source": [str(p) for p in path] if isinstance(path, tuple | list) else str(path),
        },
        "result",
        offset=[0, 0],
        **record,
    )
    kwargs = transform_kwargs(transform)
    return {
        "name": name,
        "features": features,
        "metadata": metadata,
        "colormap": _layers.keyword_colormap(features),
        **kwargs,
    }

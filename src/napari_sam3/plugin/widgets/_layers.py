"""napari layers <-> the library: images for the model, prompts in pixels, results as labels.

No Qt here: these functions take layers and arrays and are what the widgets call before starting
a job (reading layers happens on the GUI thread) and after it (building result layers).

Pixel coordinates: napari puts pixel ``(r, c)``'s centre at data coordinate ``(r, c)``; the
library's continuous pixel coordinates put it at ``(r + 0.5, c + 0.5)`` (docs/architecture.md,
letterbox.py). Prompts are mapped layer data -> world -> image layer data -> + 0.5, so a shape or
point drawn on a layer of any scale reaches the model in the image's pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from napari_sam3.core.columns import FEATURE_COLUMNS
from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.bands import parse_bands, resolve_bands
from napari_sam3.plugin.georef import crop_metadata
from napari_sam3.plugin.reader import METADATA_VERSION, SAM3_KEY

POSITIVE = "positive"  # the bool feature telling positive from negative boxes and clicks


@dataclass
class ModelImage:
    """What one widget run sends to the model, and how its results go back on the canvas."""

    image: Any  # np.ndarray or napari_sam3.imagery.raster.Raster, 1 or 3 bands, the crop only
    layer: Any  # the image layer results are placed against
    offset: tuple[int, int]  # (row, col) of the crop's pixel 0 in the layer
    shape: tuple[int, int]  # (rows, cols) of the crop
    metadata: dict[str, Any]  # georeferencing of the crop (plugin/georef.py conventions)
    stats: Any = None  # napari_sam3.imagery.stretch.StretchStats shown on screen, when known
    description: str = ""
    bands: list = field(default_factory=list)
    nodata: float | None = None


# ----------------------------------------------------------------------------- images


def stack_members(viewer, layer) -> list:
    """The band layers read from the same raster as `layer` (by band index), or [layer]."""
    record = _record(layer)
    stack = record.get("stack")
    if not stack:
        return [layer]
    members = [
        other
        for other in viewer.layers
        if getattr(other, "metadata", None) is not None and _record(other).get("stack") == stack
    ]
    return sorted(members, key=lambda m: _record(m).get("band_index", 0))


# ----------------------------------------------------------------------------- scenes


def scene_of(viewer, layer):
    """The layer that stands for `layer`'s scene in the image pickers: the first band layer
    (by band index) of a stack the reader opened, else `layer` itself."""
    return stack_members(viewer, layer)[0] if layer is not None else None


def band_label(layer) -> str:
    """How the Bands field and the picker name a band layer: its band name, or its 1-based index
    when the file names none (the reader's ``band_N``)."""
    record = _record(layer)
    band, index = record.get("band"), record.get("band_index")
    if band is None:
        return layer.name
    return str(index) if index is not None and str(band) == f"band_{index}" else str(band)


def scene_name(viewer, layer) -> str:
    """A picker entry: "name: 3 bands (B04, B03, B02)" for a stack, else the layer's name."""
    members = stack_members(viewer, layer)
    if len(members) == 1 and not _record(layer).get("stack"):
        return layer.name
    first = members[0]
    base = first.name
    suffix = f" {_record(first).get('band', '')}"
    if base.endswith(suffix) and len(base) > len(suffix):
        base = base[: -len(suffix)]
    labels = ", ".join(band_label(m) for m in members)
    return f"{base}: {len(members)} band{'s' * (len(members) != 1)} ({labels})"


def default_bands_text(viewer, layer) -> str:
    """The Bands field for `layer`'s scene as the reader describes it: its RGB (or single) band
    labels for a stack ("B04 B03 B02", "1 2 3"), else "" (the layer's own colours)."""
    if layer is None or not _record(layer).get("stack"):
        return ""
    members = {str(_record(m).get("band")): m for m in stack_members(viewer, layer)}
    wanted = [members[b] for b in map(str, _record(layer).get("rgb_bands") or ()) if b in members]
    return " ".join(band_label(m) for m in wanted)


def stretch_percentiles(layer) -> tuple[float, float] | None:
    """The percentiles of the stretch recorded on a reader layer, or None (no stretch)."""
    record = _record(layer).get("stretch")
    if not record:
        return None
    low, high = record.get("percentiles", (2.0, 98.0))
    return float(low), float(high)


def set_stretch(viewer, layer, percentiles: tuple[float, float]) -> list:
    """Stretch every band layer of `layer`'s scene at `percentiles`: each band's contrast limits
    and the stretch the model is given (the record `model_image` reads) become the same numbers,
    `napari_sam3.imagery.stretch.compute_stretch` of the pixels the reader took them from (the
    whole band, or a multiscale file's overview sample). Returns the layers changed."""
    from napari_sam3.imagery.stretch import compute_stretch
    from napari_sam3.plugin.reader import _display_limits, _stretch_record

    members = [m for m in stack_members(viewer, layer) if _record(m).get("stretch")]
    if not members:
        raise InvalidInput(
            f"{layer.name} has no stretch to change: open the raster with napari-sam3's reader "
            "(8-bit RGB images are shown and sent as they are)"
        )
    sample = None
    for member in members:
        record = _record(member)
        nodata = (member.metadata or {}).get("nodata")
        if getattr(member, "multiscale", False):
            if sample is None:
                sample = _overview_sample(member)
            plane = sample[int(record.get("band_index", 1)) - 1]
        else:
            plane = np.asarray(member.data)
        stats = compute_stretch(plane, percentiles=percentiles, nodata=nodata)
        limits = (stats.low[0], stats.high[0])
        previous = record["stretch"]
        record["stretch"] = {
            **_stretch_record(limits, stats.percentiles),
            **({"sample": previous["sample"]} if "sample" in previous else {}),
        }
        member.contrast_limits = _display_limits(limits)
    return members


def _overview_sample(layer) -> np.ndarray:
    """The (bands, rows, cols) pixels a multiscale reader layer's stretch is computed from."""
    from napari_sam3.imagery.pyramid import RasterPyramid

    source = (layer.metadata or {}).get("source")
    if not source:
        raise InvalidInput(f"{layer.name} has no source file to read its stretch sample from")
    return np.asarray(RasterPyramid(source).sample())


def image_shape(layer) -> tuple[int, int]:
    """(rows, cols) of an image layer's pixels (RGB last axis and band axes excluded)."""
    shape = tuple(layer.data.shape)
    if getattr(layer, "rgb", False):
        return shape[-3], shape[-2]
    return shape[-2], shape[-1]


def full_resolution(layer):
    """An image layer's full-resolution array: its data, or level 0 of a multiscale layer."""
    return layer.data[0] if getattr(layer, "multiscale", False) else layer.data


def pixels(layer, window) -> np.ndarray:
    """The full-resolution pixels of an image layer under `window` (row and column slices).

    A multiscale layer made by the plugin's reader is read from its source file (a windowed read
    that raises on a damaged block, where the display shows it as nodata); any other layer through
    its (level-0) array. Nothing outside the window is computed.
    """
    record = _record(layer)
    source = (getattr(layer, "metadata", None) or {}).get("source")
    if getattr(layer, "multiscale", False) and source and record.get("kind") == "image":
        from napari_sam3.imagery.raster import read_raster

        rgb = getattr(layer, "rgb", False)
        bands = None if rgb else [int(record.get("band_index", 1))]
        data = read_raster(source, bands=bands, window=window).data
        return np.moveaxis(data, 0, -1) if rgb else data[0]
    return np.asarray(full_resolution(layer)[window])


def model_image(viewer, layer, bands: str = "", region=None, window=None) -> ModelImage:
    """The image (or the crop under `region`'s last shape, or under `window` =
    (row0, row1, col0, col1)) of `layer`, as the model takes it."""
    from napari_sam3.imagery.raster import Raster
    from napari_sam3.imagery.stretch import StretchStats

    if layer is None:
        raise InvalidInput("choose an image layer")
    rows, cols = image_shape(layer)
    if window is not None:
        r0, r1, c0, c1 = window
    elif region is not None:
        r0, r1, c0, c1 = region_window(region, layer)
    else:
        r0, r1, c0, c1 = 0, rows, 0, cols
    window = np.s_[r0:r1, c0:c1]
    keys = parse_bands(bands)
    meta = crop_metadata(layer.metadata, r0, c0)
    description = layer.name
    stats = None

    if getattr(layer, "rgb", False):
        if keys:
            raise InvalidInput(f"{layer.name} is an RGB layer: leave 'bands' empty")
        image = pixels(layer, window)[..., :3]
        chosen: list = ["R", "G", "B"]
    elif _record(layer).get("stack"):
        picked, chosen = stack_bands(viewer, layer, keys)
        data = np.stack([pixels(m, window) for m in picked])
        image = Raster(
            data=data,
            crs=None,
            transform=_affine(meta.get("transform")),
            nodata=layer.metadata.get("nodata"),
            band_names=tuple(chosen),
            path=tuple(),
        )
        stats = _stretch_stats(picked, chosen, StretchStats)
        description = f"{layer.name} ({', '.join(chosen)})"
    elif layer.data.ndim == 2:
        if keys:
            if len(keys) != 1:
                raise InvalidInput(f"{layer.name} has one band: leave 'bands' empty")
            band = _record(layer).get("band")
            resolve_bands(keys, 1, None if band is None else [str(band)], layer.name)
        image = pixels(layer, window)
        chosen = [str(_record(layer).get("band", layer.name))]
        stats = _stretch_stats([layer], None, StretchStats)
    elif layer.data.ndim == 3:
        count = layer.data.shape[0]
        if keys is None and count not in (1, 3):
            raise InvalidInput(
                f"{layer.name} has {count} bands along its first axis: "
                "choose 3 (or 1) in 'bands', e.g. '4 3 2'"
            )
        names = (layer.metadata or {}).get("band_names")
        names = names if names is not None and len(names) == count else None
        index = range(count) if keys is None else resolve_bands(keys, count, names, layer.name)
        image = np.stack([np.asarray(full_resolution(layer)[i][window]) for i in index])
        chosen = [str(i + 1) for i in index]
    else:
        raise InvalidInput(f"{layer.name} has {layer.data.ndim} dimensions: choose a 2-D image")
    if r1 <= r0 or c1 <= c0:
        raise InvalidInput("the region does not overlap the image")
    nodata = (layer.metadata or {}).get("nodata")
    return ModelImage(
        image, layer, (r0, c0), (r1 - r0, c1 - c0), meta, stats, description, chosen, nodata
    )


def stack_bands(viewer, layer, keys) -> tuple[list, list[str]]:
    """The 1 or 3 band layers of `layer`'s stack that `keys` (parsed Bands; None: the scene's
    RGB bands) choose, and their band names."""
    members = stack_members(viewer, layer)
    names = [str(_record(m).get("band", m.name)) for m in members]
    wanted = keys or list(_record(layer).get("rgb_bands") or names[:3])
    picked = [members[i] for i in resolve_bands(wanted, len(names), names, layer.name)]
    if len(picked) not in (1, 3):
        raise InvalidInput(f"choose 1 or 3 bands, got {len(picked)}: {wanted}")
    return picked, [str(_record(m).get("band", m.name)) for m in picked]


def scene_stats(viewer, layer, bands: str = ""):
    """The stretch `layer`'s scene is shown with (a reader layer's record) for the bands the
    Bands text chooses, as the whole-scene run takes it; None when the layer records none."""
    from napari_sam3.imagery.stretch import StretchStats

    if layer is None:
        return None
    keys = parse_bands(bands)
    if _record(layer).get("stack"):
        picked, chosen = stack_bands(viewer, layer, keys)
        return _stretch_stats(picked, chosen, StretchStats)
    if getattr(layer, "rgb", False) or layer.ndim != 2:
        return None
    return _stretch_stats([layer], None, StretchStats)


def prepare(client, target: ModelImage):
    """The letterboxed model input; with the stretch shown on screen when the layer records it."""
    from napari_sam3.client.sam3 import PreparedImage
    from napari_sam3.imagery.letterbox import Letterbox
    from napari_sam3.imagery.raster import Raster
    from napari_sam3.imagery.stretch import to_model_rgb

    if target.stats is None:
        return client.prepare(target.image)
    nodata = None if isinstance(target.image, Raster) else target.nodata
    rgb = to_model_rgb(target.image, stats=target.stats, nodata=nodata)
    letterbox = Letterbox(rgb.shape[:2], client.image_size)
    return PreparedImage(rgb, letterbox, letterbox.apply(rgb))


def view_window(viewer, layer) -> tuple[int, int, int, int]:
    """(row0, row1, col0, col1): the full-resolution pixels of `layer` inside the canvas now.

    From the camera (centre, zoom) and the canvas size, mapped world -> the layer's pixels; a
    viewer without a canvas (no window) sees the whole image.
    """
    rows, cols = image_shape(layer)
    size = _canvas_size(viewer)
    if size is None:
        return 0, rows, 0, cols
    centre = np.asarray(viewer.camera.center, np.float64)[-2:]
    half = np.asarray(size, np.float64) / (2.0 * float(viewer.camera.zoom))
    corners = []
    for dr in (-1, 1):
        for dc in (-1, 1):
            world = np.zeros(max(viewer.dims.ndim, layer.ndim))
            world[-2:] = centre + half * (dr, dc)
            corners.append(np.asarray(layer.world_to_data(world[-layer.ndim :]))[-2:])
    corners = np.asarray(corners)
    r0 = int(np.clip(np.floor(corners[:, 0].min() + 0.5), 0, rows))
    r1 = int(np.clip(np.ceil(corners[:, 0].max() + 0.5), 0, rows))
    c0 = int(np.clip(np.floor(corners[:, 1].min() + 0.5), 0, cols))
    c1 = int(np.clip(np.ceil(corners[:, 1].max() + 0.5), 0, cols))
    if r1 <= r0 or c1 <= c0:
        raise InvalidInput(f"{layer.name} is not in view: pan to it, or choose Where: Whole image")
    return r0, r1, c0, c1


def _canvas_size(viewer):
    window = getattr(viewer, "window", None)
    qt_viewer = getattr(window, "_qt_viewer", None)  # napari has no public canvas size
    canvas = getattr(qt_viewer, "canvas", None)
    size = getattr(canvas, "size", None)
    if size is None or min(size) <= 1:
        return None
    return tuple(size)[:2]


def layer_named(viewer, name: str, kind):
    """The viewer's layer called `name` if it is a `kind` layer, else None."""
    for layer in viewer.layers:
        if layer.name == name and isinstance(layer, kind):
            return layer
    return None


FEATURES_CACHED, ENCODING = "features cached", "encoding the image"


def prepared_with_status(client, target: ModelImage):
    """Generator for a widget job: yields whether the model holds this image's features
    ("features cached") or will encode it now ("encoding the image"); returns the prepared
    image (use as ``prepared = yield from prepared_with_status(client, target)``)."""
    prepared = prepare(client, target)
    yield FEATURES_CACHED if client.is_cached(prepared) else ENCODING
    return prepared


def _stretch_stats(layers, names, stats_cls):
    records = [_record(m).get("stretch") for m in layers]
    if not records or any(not r for r in records):
        return None
    return stats_cls(
        low=tuple(r["low"] for r in records),
        high=tuple(r["high"] for r in records),
        percentiles=tuple(records[0].get("percentiles", (2.0, 98.0))),
        band_names=tuple(names) if names else None,
    )


def _affine(values):
    from rasterio.transform import Affine

    return Affine.identity() if values is None else Affine(*values[:6])


def _record(layer) -> dict[str, Any]:
    """The plugin's record in a layer's metadata (as `with_record` writes it), or {}."""
    metadata = getattr(layer, "metadata", None) or {}
    record = metadata.get(SAM3_KEY)
    return record if isinstance(record, dict) else {}


def with_record(metadata: dict[str, Any] | None, kind: str, **fields: Any) -> dict[str, Any]:
    """A copy of a layer's `metadata` carrying the plugin's record of a layer the widgets make:
    the metadata version, its `kind` ("result": listed by the results table; "prompt": a layer
    the plugin may clear) and `fields` (image_layer, offset, prompt, ...), read by `_record`."""
    out = dict(metadata or {})
    out[SAM3_KEY] = {"version": METADATA_VERSION, "kind": kind, **fields}
    return out


# ----------------------------------------------------------------------------- prompts


def to_pixels(coords, source, image) -> np.ndarray:
    """(N, D) data coordinates of layer `source` -> (N, 2) continuous (row, col) image pixels."""
    coords = np.atleast_2d(np.asarray(coords, dtype=np.float64))
    out = np.empty((len(coords), 2))
    for i, point in enumerate(coords):
        world = source.data_to_world(point)
        out[i] = np.asarray(image.world_to_data(world), dtype=np.float64)[-2:] + 0.5
    return out


def region_window(region, image) -> tuple[int, int, int, int]:
    """(row0, row1, col0, col1): the image pixels under the last shape of a Shapes layer."""
    if region is None or len(region.data) == 0:
        raise InvalidInput(f"draw a rectangle on {getattr(region, 'name', 'the region layer')}")
    pixels = to_pixels(region.data[-1], region, image)
    rows, cols = image_shape(image)
    r0 = int(np.clip(np.floor(pixels[:, 0].min()), 0, rows))
    r1 = int(np.clip(np.ceil(pixels[:, 0].max()), 0, rows))
    c0 = int(np.clip(np.floor(pixels[:, 1].min()), 0, cols))
    c1 = int(np.clip(np.ceil(pixels[:, 1].max()), 0, cols))
    if r1 <= r0 or c1 <= c0:
        raise InvalidInput(f"the region on {region.name} does not overlap {image.name}")
    return r0, r1, c0, c1


def boxes_from_shapes(shapes, target: ModelImage) -> tuple[np.ndarray, np.ndarray]:
    """Every shape's bounding box as [x1, y1, x2, y2] in the crop's pixels, and 1/0 labels
    (the layer's ``positive`` feature, else its ``label`` feature, else all positive)."""
    if shapes is None or len(shapes.data) == 0:
        return np.zeros((0, 4)), np.zeros((0,), np.int64)
    boxes = [box_from_vertices(vertices, shapes, target) for vertices in shapes.data]
    return np.asarray(boxes, np.float64), shape_labels(shapes)


def box_from_vertices(vertices, layer, target: ModelImage) -> np.ndarray:
    """The bounding box of a shape's vertices (data coordinates of `layer`), in crop pixels."""
    pixels = to_pixels(vertices, layer, target.layer)
    (y1, x1), (y2, x2) = pixels.min(axis=0), pixels.max(axis=0)
    r0, c0 = target.offset
    return np.array([x1 - c0, y1 - r0, x2 - c0, y2 - r0])


def shape_labels(layer) -> np.ndarray:
    """1 (positive) / 0 (negative) per shape or point, from the layer's features."""
    n = len(layer.data)
    features = layer.features
    if POSITIVE in features.columns:
        return np.asarray(features[POSITIVE], bool).astype(np.int64)
    if "label" in features.columns:
        return (np.asarray(features["label"]) > 0).astype(np.int64)
    return np.ones(n, np.int64)


def point_xy(coords, layer, target: ModelImage) -> np.ndarray:
    """A point (data coordinates of `layer`) as (x, y) in the crop's pixels."""
    (row, col) = to_pixels(coords, layer, target.layer)[0]
    return np.array([col - target.offset[1], row - target.offset[0]])


def crop_of(labels_layer, target: ModelImage) -> np.ndarray:
    """The part of a Labels layer on the target's pixel grid (same shape as the image layer)."""
    check_same_grid(labels_layer, target.layer)
    (r0, c0), (rows, cols) = target.offset, target.shape
    return np.asarray(labels_layer.data[..., r0 : r0 + rows, c0 : c0 + cols])


def check_same_grid(layer, image) -> None:
    """`layer` must share the image layer's pixel grid (shape and placement)."""
    shape = image_shape(image)
    if tuple(layer.data.shape[-2:]) != shape:
        raise InvalidInput(
            f"{layer.name} has shape {tuple(layer.data.shape[-2:])} but {image.name} has {shape}: "
            "use a labels layer made for this image (or let the widget make one)"
        )
    corners = np.array([[0.0, 0.0], [shape[0] - 1.0, shape[1] - 1.0]])
    mine = np.array([layer.data_to_world(c) for c in corners])[:, -2:]
    theirs = np.array([image.data_to_world(c) for c in corners])[:, -2:]
    if not np.allclose(mine, theirs, rtol=0, atol=1e-6 * max(1.0, float(np.abs(theirs).max()))):
        raise InvalidInput(f"{layer.name} is not placed on {image.name}'s pixels (scale/translate)")


# ----------------------------------------------------------------------------- results


def results_to_labels(frame: pd.DataFrame, shape: tuple[int, int], source: str = ""):
    """A results DataFrame -> int32 labels of `shape` (row ``i`` is label ``i + 1``, the
    better-scored object on top where masks overlap) and the layer's features table: the
    label, score, keyword, prompt kind, area (pixels it shows) and source of each object."""
    from napari_sam3.gis.vector import masks_to_labels

    labels = masks_to_labels(frame, tuple(shape))
    n = len(frame)
    area = np.bincount(labels.ravel(), minlength=n + 1)[1 : n + 1].astype(np.int64)
    if "score" in frame:
        score = np.asarray(frame["score"], np.float32)
    else:  # interactive candidates carry the predicted IoU
        score = np.asarray(frame["iou"] if "iou" in frame else np.full(n, np.nan), np.float32)
    features = pd.DataFrame(
        {
            "index": np.arange(1, n + 1, dtype=np.int64),
            "score": score,
            "keyword": [str(k) for k in frame["keyword"]] if "keyword" in frame else [""] * n,
            "prompt_kind": [str(k) for k in frame["prompt_kind"]]
            if "prompt_kind" in frame
            else [""] * n,
            "area": area,
            "source": [source] * n,
        },
        columns=FEATURE_COLUMNS,
    )
    return labels, features


@dataclass
class Painted:
    """What one `paint_new_labels` call wrote into a labels layer: enough to take it back."""

    layer: Any
    ids: list[int]  # the new label of each object that got pixels, in the objects' order
    where: tuple[np.ndarray, np.ndarray]  # (rows, cols) of every pixel written
    before: np.ndarray  # their values before the call
    after: np.ndarray  # the label written at each


def paint_new_labels(
    layer, objects, overwrite: bool = False, georeference: dict[str, Any] | None = None
) -> Painted:
    """Paint result objects into the analyst's Labels `layer`, each as a new label (the layer's
    max + 1, + 2, ...): the one path by which Accept (Interactive) and Merge (results table)
    write into a layer the analyst owns.

    `objects` are ``(rows, cols, row)``: an object's pixels in `layer`'s pixel indices and its
    features row (score, keyword, prompt_kind, source). Pixels already labelled (the analyst's, or
    an earlier object of this call) are left alone unless `overwrite`; an object with no pixel
    left gets no label. All of it is ONE step of napari's undo history (Ctrl+Z on the layer takes
    the whole call back); each new label gets its features row (index, area = pixels written).
    `georeference`: metadata (crs, transform, ...) the layer takes when it has no transform of its
    own, so the GeoTIFF / GeoPackage writers place it.
    """
    if layer.data.ndim != 2:
        raise InvalidInput(f"{layer.name} is not 2-D")
    next_id = int(np.max(layer.data)) + 1 if layer.data.size else 1
    ids: list[int] = []
    entries: list[dict[str, Any]] = []
    written: list[tuple[np.ndarray, ...]] = []  # rows, cols, before, after
    with layer.block_history():
        for rr, cc, row in objects:
            rr, cc = np.asarray(rr, np.intp), np.asarray(cc, np.intp)
            before = np.asarray(layer.data[rr, cc])
            if not overwrite:
                free = before == 0
                rr, cc, before = rr[free], cc[free], before[free]
            if rr.size == 0:
                continue
            layer.data_setitem((rr, cc), next_id)
            written.append((rr, cc, np.array(before, copy=True), np.full(rr.size, next_id)))
            entries.append(
                {
                    "index": next_id,
                    "score": float(row.get("score", np.nan)),
                    "keyword": str(row.get("keyword", "")),
                    "prompt_kind": str(row.get("prompt_kind", "")),
                    "area": int(rr.size),
                    "source": str(row.get("source", "")),
                }
            )
            ids.append(next_id)
            next_id += 1
    if entries:
        features = layer.features
        if len(features) and "index" not in features.columns:  # napari: row i is label i
            features = features.assign(index=np.arange(len(features)))
        add = pd.DataFrame(entries, columns=FEATURE_COLUMNS)
        layer.features = pd.concat([features, add], ignore_index=True) if len(features) else add
        if georeference and "transform" not in layer.metadata and "transform" in georeference:
            layer.metadata.update(georeference)

    def joined(part: int, dtype) -> np.ndarray:
        return np.concatenate([w[part] for w in written]) if written else np.zeros(0, dtype)

    where = (joined(0, np.intp), joined(1, np.intp))
    return Painted(layer, ids, where, joined(2, layer.data.dtype), joined(3, np.int64))


def take_back(painted: Painted) -> int:
    """Undo a `paint_new_labels` call where its labels are still there: those pixels get their
    values from before (one step of napari's undo history; a label painted over them since
    stays) and the new labels' features rows go. Returns the pixels restored."""
    layer = painted.layer
    rr, cc = painted.where
    still = np.asarray(layer.data[rr, cc]) == painted.after
    if still.any():
        with layer.block_history():
            layer.data_setitem((rr[still], cc[still]), painted.before[still])
    features = layer.features
    if "index" in features.columns:
        layer.features = features[~features["index"].isin(painted.ids)].reset_index(drop=True)
    return int(np.count_nonzero(still))


# One colour per keyword, the same in every layer of this napari session (first seen, first
# served); a keyword beyond the palette cycles. A direct colormap: label id -> its keyword's colour.
_PALETTE = (
    "#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#46f0f0", "#f032e6",
    "#bcf60c", "#fabebe", "#008080", "#e6beff", "#9a6324", "#fffac8", "#800000",
    "#aaffc3", "#808000", "#ffd8b1", "#000075",
)  # fmt: skip
_KEYWORD_COLOURS: dict[str, str] = {}


def keyword_colour(keyword: str) -> str:
    if keyword not in _KEYWORD_COLOURS:
        _KEYWORD_COLOURS[keyword] = _PALETTE[len(_KEYWORD_COLOURS) % len(_PALETTE)]
    return _KEYWORD_COLOURS[keyword]


def keyword_colormap(features: pd.DataFrame):
    """A napari DirectLabelColormap painting each label in its keyword's colour."""
    from napari.utils.colormaps import DirectLabelColormap

    colours: dict = {None: "transparent", 0: "transparent"}
    if "keyword" in features.columns and "index" in features.columns:
        for index, keyword in zip(features["index"], features["keyword"], strict=True):
            colours[int(index)] = keyword_colour(str(keyword))
    return DirectLabelColormap(color_dict=colours)


def placement(image, offset: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """scale/translate/rotate/shear/affine putting a 2-D layer whose pixel (0, 0) is pixel
    `offset` of `image` exactly on `image`'s pixels."""
    from napari.utils.transforms import CompositeAffine

    scale = np.asarray(image.scale, np.float64)[-2:]
    translate = np.asarray(image.translate, np.float64)[-2:]
    rotate = np.asarray(image.rotate, np.float64)[-2:, -2:]
    shear = np.asarray(image.shear, np.float64)
    shear = shear[-1:] if shear.ndim == 1 else shear[-2:, -2:]
    linear = CompositeAffine(scale=scale, translate=(0.0, 0.0), rotate=rotate, shear=shear)
    translate = translate + np.asarray(linear(np.asarray(offset, np.float64)))
    affine = np.asarray(image.affine.affine_matrix, np.float64)
    n = affine.shape[0] - 1
    affine2 = np.eye(3)
    affine2[:2, :2] = affine[n - 2 : n, n - 2 : n]
    affine2[:2, 2] = affine[n - 2 : n, n]
    return {
        "scale": tuple(scale),
        "translate": tuple(translate),
        "rotate": rotate,
        "shear": shear,
        "affine": affine2,
    }


def result_layer_kwargs(
    target: ModelImage, name: str, features: pd.DataFrame, **record: Any
) -> dict[str, Any]:
    """Keyword arguments of `viewer.add_labels` for a result on `target`'s crop."""
    metadata = with_record(
        target.metadata,
        "result",
        image_layer=target.layer.name,
        image=target.description,
        offset=list(target.offset),
        **record,
    )
    return {
        "name": name,
        "features": features,
        "metadata": metadata,
        "colormap": keyword_colormap(features),
        **placement(target.layer, target.offset),
    }

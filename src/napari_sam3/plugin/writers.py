"""The napari writers: a Labels layer as a GeoTIFF or as GeoPackage polygons; `LabelMask`, a label of a Labels layer as a lazy mask."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from napari_sam3.core.columns import RESULT_COLUMNS
from napari_sam3.core.errors import InvalidInput
from napari_sam3.masks.protocol import Crop, LazyMask
from napari_sam3.masks.rle import RleMask
from napari_sam3.plugin.georef import georeferencing, transform_from_layer


def write_labels_geotiff(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """npe2 writer: a labels layer -> single-band int32 GeoTIFF with the source's georeferencing.

    napari's save dialog has already asked before replacing a file, so an existing file is
    overwritten.
    """
    from napari_sam3.gis import vector as gis

    labels = _labels_2d(data, attributes)
    crs, transform = _layer_georeferencing(attributes)
    written = gis.write_labels_geotiff(
        labels, path, {"crs": crs, "transform": transform}, overwrite=True
    )
    return [str(written)]


def write_instances_gpkg(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """npe2 writer: a labels layer -> GeoPackage, one (multi)polygon per label, with its
    ``score``, ``keyword`` and ``prompt_kind`` from the layer's features; ``label_id`` is the
    label's value in the layer (and in the GeoTIFF)."""
    from napari_sam3.gis import vector as gis

    labels = _labels_2d(data, attributes)
    crs, transform = _layer_georeferencing(attributes)
    frame = labels_frame(labels, attributes.get("features"))
    values = frame.pop("label").to_numpy()
    metadata = attributes.get("metadata") or {}
    source = metadata.get("source") or attributes.get("name") or None
    gdf = gis.to_geodataframe(frame, crs=crs, transform=transform, source=source)
    gdf["label_id"] = values.astype(np.int32)
    written = gis.write_vector(gdf, path, overwrite=True)
    return [str(written)]


def labels_frame(labels: np.ndarray, features=None):
    """One row per label present: ``label``, ``mask`` (a lazy full-frame mask, dense on
    ``np.asarray``), ``box`` (pixel edges), and the ``score``, ``keyword`` and ``prompt_kind`` of
    the layer's features table (matched on its ``index`` column, else row = label) where known."""
    import pandas as pd

    labels = np.asarray(labels)
    table = _features_by_label(features)
    rows = []
    for label, pixels in _label_pixels(labels):
        mask = LabelMask(labels.shape, pixels)
        info = table.get(label, {})
        rows.append(
            {
                "label": label,
                "box": mask.box,
                "score": float(info.get("score", math.nan)),
                "mask": mask,
                "keyword": str(info.get("keyword", "") or ""),
                "prompt_kind": str(info.get("prompt_kind", "") or ""),
            }
        )
    frame = pd.DataFrame(rows, columns=["label", *RESULT_COLUMNS])
    frame["score"] = frame["score"].astype(np.float32)
    return frame


class LabelMask(LazyMask):
    """One label of a label image: its pixels kept as sorted flat indices, dense on access."""

    __slots__ = ("_shape", "pixels")

    def __init__(self, shape: tuple[int, int], pixels: np.ndarray) -> None:
        self._shape = tuple(int(v) for v in shape)
        self.pixels = pixels

    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def area(self) -> int:
        return int(self.pixels.size)

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        if self.pixels.size == 0:
            return (0, 0, 0, 0)
        rows, cols = np.divmod(self.pixels, self._shape[1])
        return (int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1)

    @property
    def box(self) -> np.ndarray:
        return np.asarray(self.bbox, np.float32)

    def crop(self) -> Crop:
        x1, y1, x2, y2 = self.bbox
        rows, cols = np.divmod(self.pixels, self._shape[1])
        out = np.zeros((y2 - y1, x2 - x1), dtype=bool)
        out[rows - y1, cols - x1] = True
        return y1, x1, out

    def to_dense(self) -> np.ndarray:
        dense = np.zeros(self._shape, bool)
        dense.ravel()[self.pixels] = True
        return dense

    def to_rle(self) -> RleMask:
        pixels = self.pixels
        if pixels.size == 0:
            return RleMask.from_intervals(pixels, pixels, self._shape)
        # Sorted pixels: a run ends where the next pixel is not the following one.
        last = np.flatnonzero(np.diff(pixels) != 1)
        starts = pixels[np.r_[0, last + 1]]
        ends = pixels[np.r_[last, pixels.size - 1]] + 1
        return RleMask.from_intervals(starts, ends, self._shape)


def _label_pixels(labels: np.ndarray):
    """(label, flat pixel indices) for every non-zero label, in increasing label order."""
    flat = labels.ravel()
    where = np.flatnonzero(flat)
    if where.size == 0:
        return
    values = flat[where]
    order = np.argsort(values, kind="stable")
    values, where = values[order], where[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    ends = np.r_[starts[1:], values.size]
    for a, b in zip(starts, ends, strict=True):
        yield int(values[a]), where[a:b]


def _features_by_label(features) -> dict[int, dict[str, Any]]:
    import pandas as pd

    if features is None:
        return {}
    table = pd.DataFrame(features)
    if table.empty:
        return {}
    if "index" in table.columns:
        keys = table["index"].astype(int).tolist()
    else:
        keys = list(range(len(table)))
    records = table.to_dict("records")
    return dict(zip(keys, records, strict=True))


def _labels_2d(data: Any, attributes: dict[str, Any]) -> np.ndarray:
    labels = np.asarray(data)
    labels = np.squeeze(labels) if labels.ndim > 2 else labels
    if labels.ndim != 2:
        name = attributes.get("name", "the layer")
        raise InvalidInput(
            f"{name} has shape {np.shape(data)}: only 2-D labels can be written as a map"
        )
    return labels


def _layer_georeferencing(attributes: dict[str, Any]):
    from rasterio.transform import Affine

    crs, transform = georeferencing(attributes.get("metadata"))
    if transform is None:
        scale = tuple(attributes.get("scale", (1.0, 1.0)))[-2:]
        translate = tuple(attributes.get("translate", (0.0, 0.0)))[-2:]
        if np.allclose(scale, 1.0) and np.allclose(translate, 0.0):
            transform = Affine.identity()  # not placed on a map: pixel coordinates
        else:
            # A layer the analyst made on a map-placed image: our world convention gives its
            # transform; with no source raster there is no CRS to record.
            transform = transform_from_layer(scale, translate)
    return crs, transform

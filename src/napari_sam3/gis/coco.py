"""Detections -> a COCO instance-segmentation file (to fine-tune SAM3 on the analyst's imagery).

Masks are COCO's own run-length encoding, uncompressed (``{"size": [h, w], "counts": [...]}``,
counts over the image in column-major order, starting with a run of zeros), which pycocotools
reads (``annToMask``) like any other COCO RLE. Categories are the keywords (or concept names),
ids 1..K in sorted order. Image entries: one for the image or scene, or (``per_tile=True``, for
:func:`~napari_sam3.scene.segment_scene` results) one per tile that holds detections, each
detection cut to the tile it came from.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from napari_sam3.core.errors import InvalidInput
from napari_sam3.core.files import atomic_write_bytes
from napari_sam3.masks.protocol import frame_masks

__all__ = ["coco_rle", "to_coco", "write_coco"]


def coco_rle(r0: int, c0: int, pixels: np.ndarray, height: int, width: int) -> dict[str, Any]:
    """COCO uncompressed RLE of a ``height x width`` image whose only set pixels are ``pixels``
    placed at row ``r0``, column ``c0`` (computed from the set pixels; nothing image-sized)."""
    rows, cols = np.nonzero(np.asarray(pixels, dtype=bool))
    total = int(height) * int(width)
    if not len(rows):
        return {"size": [int(height), int(width)], "counts": [total]}
    index = np.sort((cols.astype(np.int64) + c0) * height + (rows.astype(np.int64) + r0))
    breaks = np.flatnonzero(np.diff(index) != 1)
    starts = index[np.r_[0, breaks + 1]]
    ends = index[np.r_[breaks, len(index) - 1]] + 1
    counts = np.empty(2 * len(starts) + 1, dtype=np.int64)
    counts[0] = starts[0]
    counts[1::2] = ends - starts
    counts[2:-1:2] = starts[1:] - ends[:-1]
    counts[-1] = total - ends[-1]
    return {"size": [int(height), int(width)], "counts": counts.tolist()}


def _bbox(r0: int, c0: int, pixels: np.ndarray) -> list[float]:
    rows = np.flatnonzero(pixels.any(axis=1))
    cols = np.flatnonzero(pixels.any(axis=0))
    if not len(rows):
        return [0.0, 0.0, 0.0, 0.0]
    y, x = r0 + rows[0], c0 + cols[0]
    return [float(x), float(y), float(cols[-1] - cols[0] + 1), float(rows[-1] - rows[0] + 1)]


def to_coco(
    df: pd.DataFrame,
    image_name: str | None = None,
    per_tile: bool = False,
    description: str = "napari-sam3 detections",
) -> dict[str, Any]:
    """The COCO instance dictionary of a result DataFrame (``mask``, ``keyword``, ``score``)."""
    if "mask" not in df.columns:
        raise InvalidInput(f"to_coco needs a 'mask' column; the DataFrame has {list(df.columns)}")
    scene = df.attrs.get("scene") or {}
    shape = tuple(scene["shape"]) if scene.get("shape") else None
    masks, shape = frame_masks(df["mask"], shape, "to_coco")
    if shape is None:
        raise InvalidInput("the DataFrame is empty and does not say its image's shape")
    height, width = (int(v) for v in shape)
    if image_name is None:
        if "source" in df.columns and len(df):
            image_name = str(df["source"].iloc[0])
        elif scene.get("path"):
            path = scene["path"]
            image_name = Path(path[0] if isinstance(path, list | tuple) else path).name
        else:
            image_name = "image"
    keywords = [str(k) for k in df["keyword"]] if "keyword" in df.columns else ["object"] * len(df)
    categories = {name: i + 1 for i, name in enumerate(sorted(set(keywords)))}
    scores = df["score"].to_numpy(dtype=float) if "score" in df.columns else np.ones(len(df))

    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    if per_tile:
        tiles = df.attrs.get("tiles")
        if not tiles or "tile" not in df.columns:
            raise InvalidInput(
                "per_tile needs a segment_scene result (its 'tile' column and attrs['tiles']); "
                "for one image use per_tile=False"
            )
        windows = {int(t.index): t.bounds for t in tiles}
        stem = Path(image_name).stem
        for tile in sorted({int(t) for t in df["tile"]}):
            r0, c0, r1, c1 = windows[tile]
            image_id = len(images) + 1
            images.append(
                {
                    "id": image_id,
                    "file_name": f"{stem}_tile{tile:05d}.tif",
                    "height": r1 - r0,
                    "width": c1 - c0,
                    "source": image_name,
                    "window": [r0, c0, r1, c1],
                }
            )
            for i in np.flatnonzero(df["tile"].to_numpy() == tile):
                pixels = masks[i].window(r0, c0, r1, c1)
                annotations.append(
                    _annotation(len(annotations) + 1, image_id, 0, 0, pixels, r1 - r0, c1 - c0)
                    | {"category_id": categories[keywords[i]], "score": float(scores[i])}
                )
    else:
        images.append({"id": 1, "file_name": image_name, "height": height, "width": width})
        for i, mask in enumerate(masks):
            r0, c0, pixels = mask.crop()
            annotations.append(
                _annotation(len(annotations) + 1, 1, r0, c0, pixels, height, width)
                | {"category_id": categories[keywords[i]], "score": float(scores[i])}
            )
    return {
        "info": {
            "description": description,
            "date_created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
        "images": images,
        "annotations": annotations,
        "categories": [
            {"id": i, "name": name, "supercategory": "object"} for name, i in categories.items()
        ],
    }


def _annotation(
    ann_id: int, image_id: int, r0: int, c0: int, pixels: np.ndarray, height: int, width: int
) -> dict[str, Any]:
    pixels = np.asarray(pixels, dtype=bool)
    return {
        "id": ann_id,
        "image_id": image_id,
        "segmentation": coco_rle(r0, c0, pixels, height, width),
        "area": int(np.count_nonzero(pixels)),
        "bbox": _bbox(r0, c0, pixels),
        "iscrowd": 0,
    }


def write_coco(
    df: pd.DataFrame,
    path: str | os.PathLike,
    image_name: str | None = None,
    per_tile: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write :func:`to_coco` as JSON, atomically (an existing file only with ``overwrite``)."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        raise InvalidInput(f"a COCO file is JSON; name it .json, got {path.name!r}")
    data = json.dumps(to_coco(df, image_name, per_tile)).encode()
    return atomic_write_bytes(path, data, overwrite)

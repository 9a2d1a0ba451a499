"""Concepts encoded from vector exemplars on the scenes they fall in (the scene-exemplar workflow)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_sam3.imagery.raster import raster_info
from napari_sam3.prompts.vector import (
    ExemplarsOutside,
    as_vector_prompt,
    exemplar_boxes,
    read_vectors,
    source_name,
)
from napari_sam3.scene.run import read_tile, scene_tiles
from napari_sam3.scene.view import scene_view

__all__ = ["scene_exemplar_concepts"]


def scene_exemplar_concepts(
    client: Any,
    sources: Sequence[Any],
    exemplars: Any,
    tile_size: int | None = None,
    overlap: int | None = None,
    bands: Sequence[Any] | None = None,
    nodata: float | None = None,
    name: str | None = None,
) -> list[Any]:
    """Concepts encoded from vector exemplars on the scenes they fall in, to apply to any scene.

    For every scene of ``sources`` (raster paths), the exemplars inside it are grouped by the
    tile of :func:`~napari_sam3.scene.segment_scene`'s grid (same ``tile_size`` / ``overlap``)
    that holds each wholly (else the one holding most of it); each such tile, stretched with the
    scene's statistics as ``segment_scene`` does, encodes one Concept from its exemplars. Passed
    as ``concept=`` to ``segment_scene``, they steer every tile of every scene (a concept is
    portable: encoded on scene A, it applies to scene B). Exemplars outside every scene are an
    error naming how many.
    """
    prompt = as_vector_prompt(exemplars)
    label = name or (
        Path(prompt.source).stem if isinstance(prompt.source, str | os.PathLike) else "exemplars"
    )
    total = len(read_vectors(prompt))
    concepts: list[Any] = []
    for source in sources:
        info = raster_info(source)
        try:
            boxes, labels = exemplar_boxes(prompt, info)
        except ExemplarsOutside:
            continue  # this scene holds none of them: it is steered by the others'
        tiles = scene_tiles(client, info, tile_size, overlap)
        bounds = np.array([t.bounds for t in tiles], np.float64)  # r0, c0, r1, c1
        groups: dict[int, list[int]] = {}
        for i, (x1, y1, x2, y2) in enumerate(boxes.astype(np.float64)):
            w = np.clip(np.minimum(x2, bounds[:, 3]) - np.maximum(x1, bounds[:, 1]), 0, None)
            h = np.clip(np.minimum(y2, bounds[:, 2]) - np.maximum(y1, bounds[:, 0]), 0, None)
            groups.setdefault(int(np.argmax(w * h)), []).append(i)
        view = scene_view(source, info, bands, nodata, warn=False)
        for index, members in sorted(groups.items()):
            tile = tiles[index]
            prepared, _, _, _ = read_tile(client, source, tile, bands, view)
            if prepared is None:  # a tile that is all nodata: its exemplars mark nothing
                continue
            shift = np.array([tile.col, tile.row, tile.col, tile.row], np.float32)
            local = boxes[members] - shift
            local[:, [0, 2]] = local[:, [0, 2]].clip(0, tile.width)
            local[:, [1, 3]] = local[:, [1, 3]].clip(0, tile.height)
            concepts.append(client.encode_exemplars(prepared, local, labels[members], name=label))
    if not concepts:
        raise ExemplarsOutside(
            f"all {total} exemplars from {source_name(prompt)} fall outside every raster given "
            f"({len(sources)}): is it the right file, or the right CRS?"
        )
    return concepts

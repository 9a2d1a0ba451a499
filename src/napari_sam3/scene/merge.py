"""Across tiles: join the pieces of objects cut by tile seams, then drop cross-tile duplicates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from napari_sam3.masks.dedup import box_pairs, dedup_masks
from napari_sam3.scene.masks import SceneMask
from napari_sam3.scene.tiles import Tile

__all__ = ["Detection", "dedup_across_tiles", "merge_seams"]


@dataclass
class Detection:
    mask: SceneMask
    box: np.ndarray  # x1, y1, x2, y2 in scene pixels
    score: float
    keyword: str
    prompt_kind: str
    tile: int
    cut: bool  # touches an inner edge of its tile
    merged: int = 1


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


def merge_seams(dets: list[Detection], tiles: list[Tile], seam_iou: float) -> list[Detection]:
    if len(tiles) < 2 or not any(d.cut for d in dets):
        return dets
    parent = list(range(len(dets)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    boxes = np.array([d.mask.bbox for d in dets], dtype=np.int64)
    for i, j in box_pairs(boxes, touching=True).tolist():
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


def _union(parts: list[Detection]) -> Detection:
    boxes = np.array([p.mask.bbox for p in parts])
    c0, r0 = boxes[:, :2].min(axis=0)
    c1, r1 = boxes[:, 2:].max(axis=0)
    pixels = np.zeros((r1 - r0, c1 - c0), dtype=bool)
    for p in parts:
        pixels |= p.mask.window(r0, c0, r1, c1)
    best = max(parts, key=lambda p: p.score)
    model_boxes = np.array([p.box for p in parts])
    return Detection(
        mask=SceneMask.from_crop(pixels, int(r0), int(c0), best.mask.scene_shape),
        box=np.concatenate([model_boxes[:, :2].min(axis=0), model_boxes[:, 2:].max(axis=0)]),
        score=best.score,
        keyword=best.keyword,
        prompt_kind=best.prompt_kind,
        tile=best.tile,
        cut=False,
        merged=sum(p.merged for p in parts),
    )


def dedup_across_tiles(dets: list[Detection], threshold: float) -> list[Detection]:
    """:func:`~napari_sam3.masks.dedup.dedup_masks` per keyword, except between two unmerged
    detections of one tile (the client deduplicated those already); kept in their order."""
    if len(dets) < 2:
        return dets
    keywords = {k: i for i, k in enumerate(dict.fromkeys(d.keyword for d in dets))}
    kept = dedup_masks(
        [d.mask for d in dets],
        [d.score for d in dets],
        threshold,
        groups=[keywords[d.keyword] for d in dets],
        exempt=[d.tile if d.merged == 1 else -1 for d in dets],
    )
    return [dets[i] for i in np.sort(kept)]

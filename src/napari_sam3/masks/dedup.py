"""Removing duplicate and nested masks, and box non-maximum suppression.

:func:`dedup_masks` is exact: intersections are counted pixel for pixel from the runs (no
downsampling). Box overlap is only used to skip pairs that cannot reach the threshold.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Sequence

import numpy as np

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput
from napari_sam3.masks import rle_kernels
from napari_sam3.masks.protocol import LazyMask, Mask
from napari_sam3.masks.rle import RleMask, RleMasks

__all__ = ["box_nms", "box_pairs", "dedup_masks"]

# Upper bound on the temporary per-chunk arrays (elements), to keep memory flat for large N.
_CHUNK = 1 << 22
# Masks resolved per vectorised step of the greedy pass.
_BLOCK = 16
# Above this many (kept, block) pairs a step asks a box index for the kept masks near the block.
_DENSE_PAIRS = 1 << 14
# A pair is counted on packed bits when its probe intervals outnumber its shared bytes / this
# (measured: an interval probe ~130 ns, ANDing and counting a byte of packed rows ~1.2 ns).
_BYTES_PER_PROBE = 100
# Results remembered per original batch (see _Memo), for re-filtering without pixel work.
_MEMO_ENTRIES = 8


def dedup_masks(
    masks: RleMasks | np.ndarray | Sequence[Mask],
    scores: np.ndarray | Sequence[float],
    threshold: float = 0.85,
    groups: np.ndarray | Sequence[int] | None = None,
    exempt: np.ndarray | Sequence[int] | None = None,
) -> np.ndarray:
    """Greedy overlap-coefficient deduplication; returns kept indices, highest score first.

    Masks are visited by descending score (ties: lower index first). A mask is dropped when
    ``|A & B| / min(|A|, |B|) >= threshold`` for an already kept mask ``B``: this removes near
    duplicates and masks nested inside a kept mask (or containing one). Empty masks are always
    dropped. ``masks`` may be :class:`RleMasks`, a bool ``[N, H, W]`` array or a sequence of any
    :class:`~napari_sam3.masks.protocol.Mask` of one shape. The result is exact (intersections
    counted from the runs); only masks whose bounding boxes overlap are compared.

    ``groups`` (``[N]`` integers): a mask only suppresses masks of its own group (e.g. keyword).
    ``exempt`` (``[N]`` integers): two masks with the same non-negative value are never compared
    (e.g. masks of one tile, deduplicated together already).
    """
    batch = _as_batch(masks)
    n = len(batch)
    score = _check_scores(scores, n)
    threshold = validate.unit_interval("threshold", threshold, open_low=True)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    group = _check_labels(groups, n, "groups")
    free = _check_labels(exempt, n, "exempt")
    memo = _Memo.of(batch, score, threshold) if group is None and free is None else None
    if memo is not None:
        kept = memo.lookup()
        if kept is not None:
            return kept
    kept = _greedy(batch, score, threshold, group, free)
    if memo is not None:
        memo.store(kept)
    return kept


def _greedy(
    batch: RleMasks,
    score: np.ndarray,
    threshold: float,
    group: np.ndarray | None,
    free: np.ndarray | None,
) -> np.ndarray:
    n = len(batch)
    areas = batch.areas
    overlap = _Overlap(batch, threshold)
    order = np.argsort(-score, kind="stable")
    order = order[areas[order] > 0]
    # Greedy in score order, a block at a time: first the pairs (kept so far, block) in one
    # vectorised call, then the pairs among the block's survivors, resolved in order. Only
    # pairs whose higher-scoring mask may still be kept are measured, which matters when many
    # masks overlap one another. Once many are kept (sparse scenes), the kept masks near the
    # block come from a box index instead (8000 small masks of a 10980 px frame: 5.5 s -> 0.34 s).
    tree = None
    is_kept = np.zeros(n, dtype=bool)
    kept = np.zeros(0, dtype=np.int64)
    for start in range(0, order.size, _BLOCK):
        block = order[start : start + _BLOCK]
        if kept.size * block.size <= _DENSE_PAIRS:
            other = np.repeat(kept, block.size)
            owner = np.tile(np.arange(block.size), kept.size)
        else:
            tree = _box_tree(batch.bboxes) if tree is None else tree
            owner, other = tree.query(tree.geometries[block], predicate="intersects")
            near = is_kept[other]
            owner, other = owner[near], other[near]
        ok = _comparable(group, free, other, block[owner])
        owner, other = owner[ok], other[ok]
        hit = overlap.suppressed(other, block[owner])
        removed = np.zeros(block.size, dtype=bool)
        removed[owner[hit]] = True
        alive = np.flatnonzero(~removed)
        i, j = np.triu_indices(alive.size, k=1)
        ok = _comparable(group, free, block[alive[i]], block[alive[j]])
        i, j = i[ok], j[ok]
        hit = overlap.suppressed(block[alive[i]], block[alive[j]])
        within = np.zeros((block.size, block.size), dtype=bool)
        within[alive[i[hit]], alive[j[hit]]] = True
        for r in alive.tolist():
            if not removed[r]:
                removed |= within[r]
        is_kept[block[~removed]] = True
        kept = np.concatenate([kept, block[~removed]])
    return kept


class _Memo:
    """Greedy dedup of a score-order prefix is the full answer cut to that prefix.

    A mask's fate depends only on the masks kept before it in score order, so when a result is
    re-filtered (a stricter score_thr, a smaller max_det: a prefix of the same candidates, taken
    from the same batch with :meth:`RleMasks.take`) the masks kept are those kept before, within
    the prefix: no pixel is looked at again. Remembered per original batch (weakly), with the
    scores and the threshold of each run; anything else is computed afresh.
    """

    _lock = threading.Lock()
    _entries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, root: RleMasks, index: np.ndarray, score: np.ndarray, threshold: float):
        self.root, self.index, self.score, self.threshold = root, index, score, threshold

    @classmethod
    def of(cls, batch: RleMasks, score: np.ndarray, threshold: float) -> _Memo:
        root, index = batch.source()
        return cls(root, index, score, threshold)

    def lookup(self) -> np.ndarray | None:
        with self._lock:
            entries = list(self._entries.get(self.root, ()))
        for threshold, index, score, kept in entries:
            if threshold != self.threshold:
                continue
            result = self._within(index, score, kept)
            if result is not None:
                return result
        return None

    def _within(self, index: np.ndarray, score: np.ndarray, kept: np.ndarray):
        """``kept`` (positions in the remembered subset) cut to this query, or None unless the
        query is a score-order prefix of that subset with the same scores, in the same order."""
        where = np.full(len(self.root), -1, dtype=np.int64)
        where[index] = np.arange(index.size)
        p = where[self.index]
        if p.size and (p.min() < 0 or np.any(np.diff(p) <= 0)):
            return None
        if not np.array_equal(score[p], self.score):
            return None
        rank = np.empty(index.size, dtype=np.int64)
        rank[np.argsort(-score, kind="stable")] = np.arange(index.size)
        if p.size and rank[p].max() != p.size - 1:
            return None  # a mask ranked before one of the query is missing from it
        back = np.full(index.size, -1, dtype=np.int64)
        back[p] = np.arange(p.size)
        out = back[kept]
        return out[out >= 0]

    def store(self, kept: np.ndarray) -> None:
        with self._lock:
            entries = self._entries.setdefault(self.root, [])
            entries.insert(0, (self.threshold, self.index, self.score, kept.copy()))
            del entries[_MEMO_ENTRIES:]


def _box_tree(boxes: np.ndarray):
    import shapely

    return shapely.STRtree(shapely.box(boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]))


def box_pairs(boxes: np.ndarray, touching: bool) -> np.ndarray:
    """``(k, 2)`` index pairs ``i < j`` of boxes (x1, y1, x2, y2, ends exclusive) that overlap;
    ``touching`` also pairs boxes that only share an edge or a corner."""
    import shapely

    boxes = np.asarray(boxes)
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
    return np.stack([a, b], axis=1).astype(np.int64)


def box_nms(
    boxes: np.ndarray | Sequence[Sequence[float]],
    scores: np.ndarray | Sequence[float],
    iou_threshold: float,
) -> np.ndarray:
    """Greedy non-maximum suppression of ``[N, 4]`` xyxy boxes; kept indices, best first.

    Like ``torchvision.ops.nms``: a box is dropped when its IoU with a kept, higher-scoring box
    is strictly greater than ``iou_threshold`` (ties in score: lower index first). Boxes with
    zero area never suppress anything.
    """
    b = np.asarray(boxes, dtype=np.float64)
    if b.ndim != 2 or b.shape[1] != 4:
        raise InvalidInput(f"boxes must have shape [N, 4] (x1, y1, x2, y2), got {b.shape}")
    if not np.all(np.isfinite(b)):
        raise InvalidInput("boxes contain NaN or infinite coordinates")
    if np.any(b[:, 2] < b[:, 0]) or np.any(b[:, 3] < b[:, 1]):
        raise InvalidInput("boxes must satisfy x2 >= x1 and y2 >= y1")
    n = b.shape[0]
    score = _check_scores(scores, n)
    iou_threshold = validate.unit_interval("iou_threshold", iou_threshold)

    x1, y1, x2, y2 = b.T
    area = (x2 - x1) * (y2 - y1)
    order = np.argsort(-score, kind="stable")
    kept = []
    while order.size:
        i = order[0]
        kept.append(i)
        rest = order[1:]
        iw = np.clip(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0, None)
        ih = np.clip(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0, None)
        inter = iw * ih
        union = area[i] + area[rest] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[iou <= iou_threshold]
    return np.asarray(kept, dtype=np.int64)


# ---------------------------------------------------------------------------------------------


def _as_batch(masks: RleMasks | np.ndarray | Sequence[Mask]) -> RleMasks:
    if isinstance(masks, RleMasks):
        return masks
    if isinstance(masks, np.ndarray):
        return RleMasks.from_dense(masks)
    if isinstance(masks, Sequence) and all(isinstance(m, RleMask | LazyMask) for m in masks):
        if len(masks) == 0:
            return RleMasks.stack([], shape=(0, 0))
        return RleMasks.stack([m.to_rle() for m in masks])
    raise InvalidInput(
        "masks must be RleMasks, a bool [N, H, W] array or a sequence of masks (RleMask, "
        f"FrameMask, SceneMask, ...), got {type(masks).__name__}"
    )


def _check_labels(
    values: np.ndarray | Sequence[int] | None, n: int, name: str
) -> np.ndarray | None:
    if values is None:
        return None
    v = np.asarray(values)
    if v.shape != (n,) or (n and not np.issubdtype(v.dtype, np.integer)):
        raise InvalidInput(f"{name} must be {n} integers, got shape {v.shape}")
    return v.astype(np.int64)


def _comparable(
    group: np.ndarray | None, free: np.ndarray | None, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """Whether masks ``a`` may suppress masks ``b`` (same group, not exempt from each other)."""
    ok = np.ones(a.size, dtype=bool)
    if group is not None:
        ok &= group[a] == group[b]
    if free is not None:
        ok &= (free[a] != free[b]) | (free[a] < 0)
    return ok


def _check_scores(scores: np.ndarray | Sequence[float], n: int) -> np.ndarray:
    s = np.asarray(scores)
    if s.ndim != 1 or s.shape[0] != n:
        raise InvalidInput(f"scores must have shape [{n}], got {s.shape}")
    if s.size and not np.issubdtype(s.dtype, np.number):
        raise InvalidInput(f"scores must be numbers, got dtype {s.dtype}")
    s = s.astype(np.float64)
    if not np.all(np.isfinite(s)):
        raise InvalidInput("scores contain NaN or infinite values")
    return s


def _could_reach(
    areas: np.ndarray, boxes: np.ndarray, a: np.ndarray, b: np.ndarray, threshold: float
) -> np.ndarray:
    """False where a pair cannot reach the threshold, since |A & B| <= area(box A & box B)."""
    iw = np.minimum(boxes[a, 2], boxes[b, 2]) - np.maximum(boxes[a, 0], boxes[b, 0])
    ih = np.minimum(boxes[a, 3], boxes[b, 3]) - np.maximum(boxes[a, 1], boxes[b, 1])
    box_inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    return (box_inter > 0) & (box_inter / np.minimum(areas[a], areas[b]) >= threshold)


class _Overlap:
    """Exact ``|A & B|`` for pairs of masks of one batch, from the foreground intervals.

    All masks share one batch-wide position axis (mask index * H*W + y*W + x). ``F(x)``, the
    number of foreground pixels of the batch before ``x``, comes from one sorted array of
    interval starts. For each pair, the mask with fewer intervals in the rows shared by both
    boxes is the probe: each of its intervals ``[s, e)`` there, moved onto the other mask's
    stretch of the axis, contributes ``F(e) - F(s)``.

    Fragmented masks (noise-like model output, fields, clouds) have so many intervals that a
    pair is cheaper to count on bits: each such mask's rows are packed once (8 pixels a byte;
    with the compiled kernels of ``rle_kernels``, 64 a word and many pairs a call) and the pair's
    shared rows are ANDed and counted. A batch the compiled postprocess made is held as those
    bits already: all its pairs are counted on them. Every way is exact.
    """

    def __init__(self, batch: RleMasks, threshold: float) -> None:
        self.batch = batch
        self.packed: rle_kernels.PackedMasks | None = None
        self.threshold = threshold
        self.areas = batch.areas
        h, w = batch.shape
        self.hw = h * w
        self.w = w
        self.boxes = batch.bboxes

    # Batch-wide positions (mask index * H*W + position within the mask), made when first used:
    # with the compiled kernels, fragmented pairs need none of them.
    @functools.cached_property
    def start(self) -> np.ndarray:
        owner, start, _ = self.batch.intervals()
        return start + owner * self.hw

    @functools.cached_property
    def end(self) -> np.ndarray:
        owner, _, end = self.batch.intervals()
        return end + owner * self.hw

    @functools.cached_property
    def length(self) -> np.ndarray:
        _, start, end = self.batch.spans()
        return end - start

    @functools.cached_property
    def before(self) -> np.ndarray:
        return np.cumsum(self.length) - self.length

    @functools.cached_property
    def offsets(self) -> np.ndarray:
        """Where each mask's intervals begin (and the last ends)."""
        return self.batch.spans()[0]

    def suppressed(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each pair reaches the overlap-coefficient threshold."""
        reach = _could_reach(self.areas, self.boxes, a, b, self.threshold)
        hit = np.zeros(a.size, dtype=bool)
        a, b = a[reach], b[reach]
        inter = self.intersections(a, b)
        hit[reach] = inter / np.minimum(self.areas[a], self.areas[b]) >= self.threshold
        return hit

    def intersections(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.zeros(a.size, dtype=np.int64)
        if a.size == 0:
            return out
        y0 = np.maximum(self.boxes[a, 1], self.boxes[b, 1])
        y1 = np.minimum(self.boxes[a, 3], self.boxes[b, 3])
        x0 = np.maximum(self.boxes[a, 0], self.boxes[b, 0])
        x1 = np.minimum(self.boxes[a, 2], self.boxes[b, 2])
        held = self.batch.packed
        if held is not None:  # every mask is held packed already: count on bits
            return held.and_counts(a, b, y0, y1, x0, x1)
        first_a, count_a = self._in_rows(a, y0, y1)
        first_b, count_b = self._in_rows(b, y0, y1)
        swap = count_a > count_b
        count = np.where(swap, count_b, count_a)
        shared_bytes = np.maximum(y1 - y0, 0) * np.maximum((x1 + 7) // 8 - x0 // 8, 0)
        dense = count > shared_bytes / _BYTES_PER_PROBE
        pairs = np.flatnonzero(dense)
        if pairs.size:
            a_, b_ = a[pairs], b[pairs]
            packed = self._words()
            _, start, end = self.batch.spans()
            packed.pack(np.concatenate([a_, b_]), start, end, self.offsets)
            out[pairs] = packed.and_counts(a_, b_, y0[pairs], y1[pairs], x0[pairs], x1[pairs])
        k = ~dense
        out[k] = self._by_intervals(a[k], b[k], swap[k], first_a[k], first_b[k], count[k])
        return out

    def _words(self) -> rle_kernels.PackedMasks:
        """The masks as bits for the compiled kernels (each packed when first needed)."""
        if self.packed is None:
            self.packed = rle_kernels.PackedMasks(self.boxes, self.w)
        return self.packed

    def _by_intervals(
        self,
        a: np.ndarray,
        b: np.ndarray,
        swap: np.ndarray,
        first_a: np.ndarray,
        first_b: np.ndarray,
        count: np.ndarray,
    ) -> np.ndarray:
        out = np.zeros(a.size, dtype=np.int64)
        if a.size == 0:
            return out
        target = np.where(swap, a, b)
        first = np.where(swap, first_b, first_a)
        shift = (target - np.where(swap, b, a)) * self.hw
        total = np.cumsum(count)
        lo = 0
        while lo < a.size:
            # Take pairs until the expanded interval arrays would exceed _CHUNK elements.
            done = int(total[lo - 1]) if lo else 0
            hi = max(lo + 1, int(np.searchsorted(total, done + _CHUNK, side="right")))
            c = count[lo:hi]
            idx = np.arange(c.sum(), dtype=np.int64) + np.repeat(
                first[lo:hi] - (np.cumsum(c) - c), c
            )
            moved = np.repeat(shift[lo:hi], c)
            covered = self._prefix(self.end[idx] + moved) - self._prefix(self.start[idx] + moved)
            sums = np.concatenate([[0], np.cumsum(covered)])
            ends = np.cumsum(c)
            out[lo:hi] = sums[ends] - sums[ends - c]
            lo = hi
        return out

    def _in_rows(
        self, mask: np.ndarray, y0: np.ndarray, y1: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """First index and number of ``mask``'s intervals touching rows ``y0 <= y < y1``."""
        if rle_kernels.ENABLED:
            _, start, end = self.batch.spans()
            return rle_kernels.in_rows(start, end, self.offsets, mask, y0, y1, self.w)
        base = mask * self.hw
        first = np.searchsorted(self.end, base + y0 * self.w, side="right")
        stop = np.searchsorted(self.start, base + y1 * self.w, side="left")
        return first, np.maximum(stop - first, 0)

    def _prefix(self, x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.start, x, side="right") - 1
        kk = np.maximum(k, 0)
        inside = np.minimum(x - self.start[kk], self.length[kk])
        return np.where(k >= 0, self.before[kk] + inside, 0)

"""Mask dedup (overlap coefficient) and box NMS, against brute-force references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import napari_sam3.masks.dedup as dedup_module
from napari_sam3.masks import box_nms, decode_masks, dedup_masks, encode_masks

# ----------------------------------------------------------------------------- references


def reference_dedup(masks: np.ndarray, scores: np.ndarray, threshold: float) -> list[int]:
    """The rule of dedup_masks, spelled out pixel by pixel."""
    order = sorted(range(len(masks)), key=lambda i: (-scores[i], i))
    kept: list[int] = []
    for i in order:
        area = int(masks[i].sum())
        if area == 0:
            continue
        duplicate = False
        for k in kept:
            inter = int(np.logical_and(masks[i], masks[k]).sum())
            if inter / min(area, int(masks[k].sum())) >= threshold:
                duplicate = True
                break
        if not duplicate:
            kept.append(i)
    return kept


def reference_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> list[int]:
    order = sorted(range(len(boxes)), key=lambda i: (-scores[i], i))
    kept: list[int] = []
    for i in order:
        x1, y1, x2, y2 = boxes[i]
        suppressed = False
        for k in kept:
            a1, b1, a2, b2 = boxes[k]
            iw = max(0.0, min(x2, a2) - max(x1, a1))
            ih = max(0.0, min(y2, b2) - max(y1, b1))
            inter = iw * ih
            union = (x2 - x1) * (y2 - y1) + (a2 - a1) * (b2 - b1) - inter
            if union > 0 and inter / union > iou_threshold:
                suppressed = True
                break
        if not suppressed:
            kept.append(i)
    return kept


@st.composite
def mask_sets(draw, max_n: int = 24) -> np.ndarray:
    """Masks that overlap a lot: random rectangles, noisy rectangles, copies, shifted copies
    and sub-regions of earlier masks."""
    n = draw(st.integers(0, max_n))
    h = draw(st.integers(1, 24))
    w = draw(st.integers(1, 24))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    masks = np.zeros((n, h, w), dtype=bool)
    for i in range(n):
        kind = rng.integers(0, 5) if i else 0
        j = int(rng.integers(0, i)) if i else 0
        if kind == 0 or kind == 1:
            y0, y1 = sorted(rng.integers(0, h + 1, 2))
            x0, x1 = sorted(rng.integers(0, w + 1, 2))
            fill = 1.0 if kind == 0 else rng.uniform(0.5, 1.0)
            masks[i, y0:y1, x0:x1] = rng.random((y1 - y0, x1 - x0)) < fill
        elif kind == 2:
            masks[i] = masks[j]
        elif kind == 3:
            masks[i] = np.roll(masks[j], tuple(rng.integers(-2, 3, 2)), axis=(0, 1))
        else:
            masks[i] = masks[j] & (rng.random((h, w)) < rng.uniform(0.3, 1.0))
    return masks


thresholds = st.sampled_from([0.05, 0.3, 0.5, 0.7, 0.85, 0.9, 1.0])


def scores_for(n: int, seed: int, ties: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4, n).astype(float) if ties else rng.random(n)


# ----------------------------------------------------------------------------- dedup_masks


@settings(max_examples=200, deadline=None)
@given(mask_sets(), thresholds, st.integers(0, 2**32 - 1), st.booleans())
def test_dedup_matches_reference(masks, threshold, seed, ties) -> None:
    scores = scores_for(len(masks), seed, ties)
    expected = reference_dedup(masks, scores, threshold)
    rle = decode_masks(encode_masks(masks))
    assert dedup_masks(rle, scores, threshold).tolist() == expected
    assert dedup_masks(masks, scores, threshold).tolist() == expected
    assert dedup_masks(rle.as_list(), scores, threshold).tolist() == expected


@pytest.mark.parametrize(("chunk", "block"), [(1, 1), (3, 2), (7, 5)])
@settings(max_examples=40, deadline=None)
@given(masks=mask_sets(max_n=20), threshold=thresholds, seed=st.integers(0, 2**32 - 1))
def test_dedup_small_chunks_and_blocks(chunk, block, masks, threshold, seed) -> None:
    """The chunked intersection loop and the blocked greedy pass give the same answer."""
    scores = scores_for(len(masks), seed, ties=False)
    expected = reference_dedup(masks, scores, threshold)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dedup_module, "_CHUNK", chunk)
        patch.setattr(dedup_module, "_BLOCK", block)
        assert dedup_masks(masks, scores, threshold).tolist() == expected


def _rect(h: int, w: int, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
    m = np.zeros((h, w), dtype=bool)
    m[y0:y1, x0:x1] = True
    return m


def test_nested_duplicate_and_disjoint_masks() -> None:
    h = w = 40
    big = _rect(h, w, 0, 30, 0, 30)
    nested = _rect(h, w, 5, 10, 5, 10)  # entirely inside big
    shifted = _rect(h, w, 1, 31, 1, 31)  # big moved by one pixel: 29*29/900 = 0.934
    disjoint = _rect(h, w, 0, 8, 32, 40)  # touches neither big nor partial
    partial = _rect(h, w, 20, 40, 20, 40)  # 100 of its 400 pixels inside big
    masks = np.stack([nested, big, shifted, disjoint, partial])
    scores = np.array([0.5, 0.9, 0.8, 0.3, 0.4])
    kept = dedup_masks(masks, scores, 0.85)
    assert kept.tolist() == [1, 4, 3]
    # A high-scoring part suppresses the lower-scoring whole too (coefficient 1).
    kept = dedup_masks(masks, np.array([0.95, 0.9, 0.8, 0.3, 0.4]), 0.85)
    assert kept.tolist() == [0, 4, 3]
    # With a threshold above the shifted copy's coefficient, it survives.
    assert dedup_masks(masks, scores, 0.95).tolist() == [1, 2, 4, 3]


def test_threshold_boundary_is_inclusive() -> None:
    a = _rect(10, 10, 0, 4, 0, 5)  # 20 pixels
    b = np.zeros((10, 10), dtype=bool)
    b[0:4, 0:5] = True
    b[0, :3] = False  # 17 pixels, all inside a
    b[9, 9] = True  # 18 pixels, 17 shared: coefficient 17/18
    masks = np.stack([a, b])
    scores = np.array([1.0, 0.5])
    assert 17 / 18 >= 0.85
    assert dedup_masks(masks, scores, 17 / 18).tolist() == [0]
    assert dedup_masks(masks, scores, np.nextafter(17 / 18, 1.0)).tolist() == [0, 1]


def test_empty_masks_are_dropped_and_order_is_by_score() -> None:
    masks = np.zeros((4, 8, 8), dtype=bool)
    masks[1, :2, :2] = True
    masks[3, 5:, 5:] = True
    # Index 0 and 2 are empty; equal scores keep index order.
    kept = dedup_masks(masks, np.array([1.0, 0.2, 0.9, 0.2]), 0.85)
    assert kept.tolist() == [1, 3]
    assert kept.dtype == np.int64


def test_dedup_of_nothing() -> None:
    assert dedup_masks(np.zeros((0, 5, 5), dtype=bool), np.zeros(0), 0.5).tolist() == []
    assert dedup_masks([], [], 0.5).tolist() == []


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.0001, 2, float("nan"), "high", None])
def test_dedup_rejects_bad_threshold(threshold) -> None:
    masks = np.ones((2, 3, 3), dtype=bool)
    with pytest.raises(ValueError, match="threshold"):
        dedup_masks(masks, [1.0, 0.5], threshold)


def test_dedup_rejects_bad_scores_and_masks() -> None:
    masks = np.ones((2, 3, 3), dtype=bool)
    with pytest.raises(ValueError, match="scores"):
        dedup_masks(masks, [1.0], 0.5)
    with pytest.raises(ValueError, match="NaN"):
        dedup_masks(masks, [1.0, float("nan")], 0.5)
    with pytest.raises(ValueError, match="scores"):
        dedup_masks(masks, np.ones((2, 1)), 0.5)
    with pytest.raises(ValueError, match="dtype bool"):
        dedup_masks(masks.astype(np.uint8), [1.0, 0.5], 0.5)
    with pytest.raises(ValueError, match="RleMasks"):
        dedup_masks([masks[0], masks[1]], [1.0, 0.5], 0.5)


# ----------------------------------------------------------------------------- box_nms


@st.composite
def box_sets(draw) -> np.ndarray:
    n = draw(st.integers(0, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xy = rng.uniform(0, 50, (n, 2))
    wh = rng.uniform(0, 25, (n, 2))
    wh[rng.random(n) < 0.1] = 0.0  # some degenerate boxes
    boxes = np.concatenate([xy, xy + wh], axis=1)
    if n > 1:
        # Exact and near copies, so that suppression happens.
        k = n // 3
        src, dst = rng.integers(0, n, k), rng.integers(0, n, k)
        jitter = rng.uniform(-1, 1, (k, 4)) * (rng.random((k, 1)) < 0.5)
        boxes[dst] = boxes[src] + jitter
        boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2])
    return boxes


@settings(max_examples=200, deadline=None)
@given(
    box_sets(), st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.7, 1.0]), st.integers(0, 99), st.booleans()
)
def test_box_nms_matches_reference(boxes, iou_threshold, seed, ties) -> None:
    scores = scores_for(len(boxes), seed, ties)
    expected = reference_nms(boxes, scores, iou_threshold)
    assert box_nms(boxes, scores, iou_threshold).tolist() == expected


def test_box_nms_known_case() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 5]], float)
    scores = np.array([0.9, 0.8, 0.7, 0.95])
    # IoU(0,1) = 81/119 = 0.68; IoU(0,3) = 0.5; box 2 is disjoint.
    assert box_nms(boxes, scores, 0.5).tolist() == [3, 0, 2]
    assert box_nms(boxes, scores, 0.49).tolist() == [3, 1, 2]
    assert box_nms(boxes, scores, 0.7).tolist() == [3, 0, 1, 2]
    assert box_nms(np.zeros((0, 4)), np.zeros(0), 0.5).tolist() == []


@pytest.mark.parametrize(
    ("boxes", "scores", "iou", "match"),
    [
        (np.zeros((2, 3)), [1, 2], 0.5, r"\[N, 4\]"),
        (np.array([[0, 0, 1, 1]]), [1, 2], 0.5, "scores"),
        (np.array([[0, 0, np.nan, 1]]), [1], 0.5, "NaN"),
        (np.array([[2, 0, 1, 1]]), [1], 0.5, "x2 >= x1"),
        (np.array([[0, 0, 1, 1]]), [np.inf], 0.5, "scores"),
        (np.array([[0, 0, 1, 1]]), [1], 1.5, "iou_threshold"),
        (np.array([[0, 0, 1, 1]]), [1], -0.1, "iou_threshold"),
    ],
)
def test_box_nms_rejects_bad_input(boxes, scores, iou, match) -> None:
    with pytest.raises(ValueError, match=match):
        box_nms(boxes, scores, iou)


@pytest.mark.parametrize("bytes_per_probe", [1e-12, 1e12])
@settings(max_examples=60, deadline=None)
@given(masks=mask_sets(max_n=20), threshold=thresholds, seed=st.integers(0, 2**32 - 1))
def test_dedup_on_intervals_only_and_on_packed_bits_only(
    bytes_per_probe, masks, threshold, seed
) -> None:
    """Both exact ways of counting |A & B| (intervals, packed rows) give the reference answer."""
    scores = scores_for(len(masks), seed, ties=False)
    expected = reference_dedup(masks, scores, threshold)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dedup_module, "_BYTES_PER_PROBE", bytes_per_probe)
        assert dedup_masks(masks, scores, threshold).tolist() == expected


def test_fragmented_full_width_masks_match_the_reference() -> None:
    """Noise-like masks spanning whole rows (runs wrap from row to row), near duplicates among
    them: the packed-row count is taken for these pairs."""
    rng = np.random.default_rng(2)
    base = rng.random((40, 75)) < 0.5
    masks = np.stack([base ^ (rng.random((40, 75)) < p) for p in (0.0, 0.02, 0.1, 0.4, 0.05)])
    masks[4, :10] = False
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.95])
    for threshold in (0.5, 0.85, 0.97):
        expected = reference_dedup(masks, scores, threshold)
        assert dedup_masks(masks, scores, threshold).tolist() == expected

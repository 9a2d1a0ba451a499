"""The packed-bits layout has one owner, `rle_kernels.PackedMasks`, reached through public
members: masks packed from their intervals (compiled or numpy) give back the same intervals, a
batch made from packed bits (`RleMasks.from_packed`) decodes to the same pixels, intersection
counts on the bits are the dense counts, and dedup keeps what a dense numpy reference keeps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_sam3.masks import rle_kernels
from napari_sam3.masks.dedup import dedup_masks
from napari_sam3.masks.rle import RleMasks

# the fixture only chooses the kernels: the same for every input hypothesis makes
FIXED_KERNELS = [HealthCheck.function_scoped_fixture]


@pytest.fixture(params=[True, False], ids=["compiled", "numpy"])
def kernels(request):
    saved = rle_kernels.ENABLED
    rle_kernels.ENABLED = request.param
    yield request.param
    rle_kernels.ENABLED = saved


def random_masks(seed: int, n: int, h: int, w: int) -> np.ndarray:
    """Noise, rectangles and near copies of earlier masks (so that dedup has work to do)."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((n, h, w), dtype=bool)
    for i in range(n):
        kind = rng.integers(4)
        if kind == 0:
            masks[i] = rng.random((h, w)) < rng.uniform(0.05, 0.95)
        elif kind == 1:
            y0, x0 = rng.integers(h), rng.integers(w)
            masks[i, y0 : rng.integers(y0, h + 1), x0 : rng.integers(x0, w + 1)] = True
        elif kind == 2 and i:
            masks[i] = masks[rng.integers(i)] ^ (rng.random((h, w)) < 0.03)
        # kind 3 (or 2 first): an empty mask
    return masks


def packed_of(batch: RleMasks) -> rle_kernels.PackedMasks:
    """Every mask of `batch` packed from its intervals, through the public members."""
    offsets, starts, ends = batch.spans()
    packed = rle_kernels.PackedMasks(batch.bboxes, batch.shape[1], batch.areas, np.diff(offsets))
    packed.pack(np.arange(len(batch)), starts, ends, offsets)
    return packed


masks_args = dict(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    h=st.integers(1, 40),
    w=st.integers(1, 150),  # more than two 64-pixel words a row
)


@settings(max_examples=40, deadline=None, suppress_health_check=FIXED_KERNELS)
@given(**masks_args)
def test_packing_round_trips_through_the_public_members(kernels, seed, n, h, w):
    dense = random_masks(seed, n, h, w)
    batch = RleMasks.from_dense(dense)
    packed = packed_of(batch)
    offsets, starts, ends = packed.spans()
    expected = batch.spans()
    assert np.array_equal(offsets, expected[0])
    assert np.array_equal(starts, expected[1]) and np.array_equal(ends, expected[2])
    for i in range(n):
        s, e = packed.intervals_of(i)
        assert np.array_equal(s, expected[1][offsets[i] : offsets[i + 1]])
        assert np.array_equal(e, expected[2][offsets[i] : offsets[i + 1]])
    last_on = dense.reshape(n, -1)[:, -1]
    held = RleMasks.from_packed(packed, np.diff(offsets), last_on, (h, w))
    assert held.packed is packed
    assert np.array_equal(held.to_dense(), dense)
    assert np.array_equal(held.runs, batch.runs)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), w=st.integers(1, 150))
def test_both_packers_write_the_same_words(seed, w):
    batch = RleMasks.from_dense(random_masks(seed, 5, 30, w))
    saved = rle_kernels.ENABLED
    try:
        rle_kernels.ENABLED = True
        compiled = packed_of(batch)
        rle_kernels.ENABLED = False
        numpy_made = packed_of(batch)
    finally:
        rle_kernels.ENABLED = saved
    assert np.array_equal(compiled.at, numpy_made.at)
    assert np.array_equal(compiled.store[: compiled.used], numpy_made.store[: numpy_made.used])


@settings(max_examples=40, deadline=None, suppress_health_check=FIXED_KERNELS)
@given(**masks_args)
def test_intersection_counts_on_bits_are_the_dense_counts(kernels, seed, n, h, w):
    dense = random_masks(seed, n, h, w)
    batch = RleMasks.from_dense(dense)
    packed = packed_of(batch)
    a, b = (v.reshape(-1) for v in np.meshgrid(np.arange(n), np.arange(n)))
    boxes = batch.bboxes
    counts = packed.and_counts(
        a,
        b,
        np.maximum(boxes[a, 1], boxes[b, 1]),
        np.minimum(boxes[a, 3], boxes[b, 3]),
        np.maximum(boxes[a, 0], boxes[b, 0]),
        np.minimum(boxes[a, 2], boxes[b, 2]),
    )
    expected = (dense[a] & dense[b]).reshape(a.size, -1).sum(axis=1)
    assert np.array_equal(counts, expected)


def dense_dedup(masks: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """The greedy overlap-coefficient rule on bool arrays: by descending score (ties: lower
    index first), a mask is dropped when empty or when |A & B| / min(|A|, |B|) >= threshold for
    an already kept B."""
    areas = masks.reshape(len(masks), -1).sum(axis=1)
    kept: list[int] = []
    for i in np.argsort(-scores, kind="stable").tolist():
        if areas[i] == 0:
            continue
        if all((masks[i] & masks[j]).sum() / min(areas[i], areas[j]) < threshold for j in kept):
            kept.append(i)
    return np.asarray(kept, dtype=np.int64)


@settings(max_examples=40, deadline=None, suppress_health_check=FIXED_KERNELS)
@given(**masks_args, threshold=st.sampled_from([0.3, 0.5, 0.85, 1.0]), held=st.booleans())
def test_dedup_keeps_what_a_dense_reference_keeps(kernels, seed, n, h, w, threshold, held):
    dense = random_masks(seed, n, h, w)
    scores = np.random.default_rng(seed).integers(0, 4, n).astype(np.float64)  # with ties
    batch = RleMasks.from_dense(dense)
    if held:  # as the compiled postprocess gives it: only bits, intervals made when asked for
        packed = packed_of(batch)
        batch = RleMasks.from_packed(
            packed, np.diff(batch.spans()[0]), dense.reshape(n, -1)[:, -1], (h, w)
        )
    kept = dedup_masks(batch, scores, threshold)
    assert np.array_equal(kept, dense_dedup(dense, scores, threshold))

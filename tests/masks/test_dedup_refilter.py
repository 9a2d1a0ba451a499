"""Re-filtering reuses a dedup result only where it is exactly what a fresh run gives."""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3.masks import RleMasks, dedup_masks
from napari_sam3.masks import dedup as dedup_module


def overlapping(n: int = 60, size: int = 64, seed: int = 0) -> tuple[RleMasks, np.ndarray]:
    """Rectangles, near duplicates and nested parts, with tied scores, best first as a
    postprocess answers them."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((n, size, size), bool)
    for i in range(n):
        if i and rng.random() < 0.5:
            j = int(rng.integers(0, i))
            masks[i] = np.roll(masks[j], tuple(rng.integers(-2, 3, 2)), axis=(0, 1))
            if rng.random() < 0.5:
                masks[i, : size // 2] = False  # nested part of an earlier mask
        else:
            y, x = rng.integers(0, size - 8, 2)
            h, w = rng.integers(3, 24, 2)
            masks[i, y : y + h, x : x + w] = True
    scores = np.sort(np.round(rng.random(n), 1))[::-1].astype(np.float32)  # ties
    return RleMasks.from_dense(masks), scores


def fresh(masks: RleMasks, scores: np.ndarray, threshold: float) -> np.ndarray:
    """dedup on a batch with no history (built again from its own runs)."""
    return dedup_masks(RleMasks.stack(masks.as_list(), masks.shape), scores, threshold)


class CountingGreedy:
    """Counts the greedy passes (pixel work) that dedup_masks makes, while ``on``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real, self.calls, self.on = dedup_module._greedy, 0, True
        monkeypatch.setattr(dedup_module, "_greedy", self)

    def __call__(self, *args):
        self.calls += self.on
        return self.real(*args)

    def fresh(self, masks: RleMasks, scores: np.ndarray, threshold: float) -> np.ndarray:
        self.on = False
        try:
            return fresh(masks, scores, threshold)
        finally:
            self.on = True


@pytest.mark.parametrize("threshold", [0.5, 0.85])
def test_prefixes_of_a_deduplicated_batch_match_a_fresh_run(threshold, monkeypatch):
    batch, scores = overlapping()
    full = dedup_masks(batch, scores, threshold)
    assert 0 < len(full) < len(batch)  # something was dropped: the prefix rule matters
    greedy = CountingGreedy(monkeypatch)
    for k in (1, 7, 23, 40, len(batch)):  # score_thr / max_det cuts: prefixes of the order
        part = batch.take(np.arange(k))
        got = dedup_masks(part, scores[:k], threshold)
        assert greedy.calls == 0, k  # answered from the remembered run
        np.testing.assert_array_equal(got, greedy.fresh(part, scores[:k], threshold))
    # prefix of a prefix (multi: a keyword's slice of a re-filtered answer)
    inner = batch.take(np.arange(30)).take(np.arange(12))
    got = dedup_masks(inner, scores[:12], threshold)
    assert greedy.calls == 0
    np.testing.assert_array_equal(got, greedy.fresh(inner, scores[:12], threshold))


def test_anything_but_a_prefix_with_the_same_scores_is_computed_again(monkeypatch):
    batch, scores = overlapping(seed=1)
    dedup_masks(batch, scores, 0.85)
    greedy = CountingGreedy(monkeypatch)
    cases = [
        (np.arange(1, 20), scores[1:20], 0.85),  # not a prefix: the best mask is missing
        (np.arange(20)[::-1], scores[:20][::-1], 0.85),  # reordered
        (np.arange(20), scores[:20] * 0.5 + 0.1, 0.85),  # other scores
        (np.arange(20), scores[:20], 0.6),  # another threshold
        (np.array([0, 2, 1, 3]), scores[[0, 2, 1, 3]], 0.85),  # a tie broken the other way
    ]
    assert scores[1] == scores[2]
    for index, s, threshold in cases:
        part = batch.take(index)
        before = greedy.calls
        got = dedup_masks(part, s, threshold)
        assert greedy.calls == before + 1, index  # computed afresh
        np.testing.assert_array_equal(got, greedy.fresh(part, s, threshold))


def test_a_range_take_shares_the_runs_and_remembers_its_source():
    batch, _ = overlapping(n=10)
    part = batch.take(np.arange(3, 8))
    assert np.shares_memory(part.runs, batch.runs)
    root, index = part.take([1, 2]).source()
    assert root is batch and index.tolist() == [4, 5]
    np.testing.assert_array_equal(part.to_dense(), batch.to_dense()[3:8])
    scattered = batch.take([7, 2, 2])
    np.testing.assert_array_equal(scattered.to_dense(), batch.to_dense()[[7, 2, 2]])
    assert scattered.source()[1].tolist() == [7, 2, 2]

"""Postprocess from per-mask crops: the same masks and the same bytes as the dense path."""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3.masks.rle import decode_masks, encode_masks
from napari_sam3.runtime.postprocess import (
    encode_thresholded,
    threshold_crops,
    upsample_logits,
)


def blobs(n: int, m: int, seed: int) -> np.ndarray:
    """Smooth mask logits like a trained model's (discs), plus the edge cases: an empty mask,
    a full one, one touching every border, one a single low-res pixel wide."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:m, 0:m]
    out = np.empty((n, m, m), np.float32)
    for i in range(n):
        cx, cy = rng.uniform(0, m, 2)
        out[i] = (rng.uniform(1, m / 4) - np.hypot(xx - cx, yy - cy)) / 2
    out[0] = -4.0
    out[1] = 4.0
    out[2] = np.where((yy == 0) | (xx == 0) | (yy == m - 1) | (xx == m - 1), 3.0, -3.0)
    out[3] = -3.0
    out[3, m // 2, m // 3] = 2.0
    return out


@pytest.mark.parametrize(("n", "m", "size", "cut"), [(12, 32, 112, 0.0), (8, 288, 1008, 0.4)])
def test_crops_match_the_dense_upsampling(n, m, size, cut):
    logits = blobs(n, m, seed=m)
    dense = upsample_logits(logits, size) > cut
    crops = threshold_crops(logits, size, cut)
    assert crops[0] is None  # nothing above the cut: no crop
    for i, crop in enumerate(crops):
        rebuilt = np.zeros((size, size), bool)
        if crop is not None:
            row, col, pixels = crop
            rebuilt[row : row + pixels.shape[0], col : col + pixels.shape[1]] = pixels
        assert np.array_equal(rebuilt, dense[i]), i
    payload = encode_thresholded(logits, size, cut)
    assert payload == encode_masks(dense)
    assert np.array_equal(decode_masks(payload).to_dense(), dense)

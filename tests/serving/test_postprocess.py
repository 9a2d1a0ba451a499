"""The `sam3_postprocess` logic: scores, ordering, thresholds, upsampling, RLE."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_sam3.masks.rle import decode_masks
from napari_sam3.runtime.postprocess import (
    postprocess,
    sigmoid,
    upsample_logits,
    upsample_threshold,
)


@pytest.mark.parametrize(("n", "m", "size"), [(5, 32, 112), (2, 288, 1008), (3, 7, 30)])
def test_upsampling_matches_torch_bilinear(n, m, size):
    logits = (np.random.default_rng(m).normal(size=(n, m, m)) * 3).astype(np.float32)
    ref = torch.nn.functional.interpolate(
        torch.from_numpy(logits)[:, None], size=(size, size), mode="bilinear", align_corners=False
    )[:, 0].numpy()
    np.testing.assert_allclose(upsample_logits(logits, size), ref, atol=1e-3)
    full = upsample_logits(logits, size) > 0.3
    assert np.array_equal(upsample_threshold(logits, size, 0.3), full)


def _heads(q=12, m=16, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(1, q)).astype(np.float32)
    boxes = np.sort(rng.uniform(0, 1, (1, q, 4)).astype(np.float32).reshape(1, q, 2, 2), axis=2)
    boxes = boxes.transpose(0, 1, 3, 2).reshape(1, q, 4)
    masks = rng.normal(size=(1, q, m, m)).astype(np.float32)
    return logits, boxes, masks, np.array([[0.7]], np.float32)


def test_scores_order_thresholds_and_max_det():
    logits, boxes, masks, presence = _heads()
    expected = sigmoid(logits[0]) * sigmoid(presence[0, :1])
    scores, out_boxes, payload = postprocess(logits, boxes, masks, presence, 64, score_thr=0.0)
    np.testing.assert_allclose(scores, np.sort(expected)[::-1], rtol=1e-6)
    order = np.argsort(-expected, kind="stable")
    np.testing.assert_allclose(out_boxes, boxes[0][order] * 64, rtol=1e-6)
    decoded = decode_masks(payload)
    assert len(decoded) == len(scores) and decoded.shape == (64, 64)
    assert np.array_equal(decoded.to_dense(), upsample_logits(masks[0][order], 64) > 0)
    cut = float(np.median(expected))
    assert len(postprocess(logits, boxes, masks, presence, 64, score_thr=cut)[0]) == np.sum(
        expected >= cut
    )
    assert len(postprocess(logits, boxes, masks, presence, 64, score_thr=0.0, max_det=3)[0]) == 3
    nothing = postprocess(logits, boxes, masks, presence, 64, score_thr=1.0)
    assert len(nothing[0]) == 0 and len(decode_masks(nothing[2])) == 0
    strict = decode_masks(postprocess(logits, boxes, masks, presence, 64, 0.0, mask_thr=0.9)[2])
    assert strict.areas.sum() < decoded.areas.sum()


@pytest.mark.parametrize(
    ("option", "value"), [("score_thr", 1.5), ("mask_thr", 0.0), ("mask_thr", 1.0), ("max_det", -1)]
)
def test_bad_options_are_clear_errors(option, value):
    with pytest.raises(ValueError, match=option):
        postprocess(*_heads(), 64, **{option: value})

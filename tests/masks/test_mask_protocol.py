"""The one mask interface: every lazy mask kind answers the same for the same pixels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from napari_sam3.client.results import FrameMask
from napari_sam3.imagery.letterbox import Letterbox
from napari_sam3.masks import ArrayMask, RleMask, as_mask, dedup_masks, paint_labels, score_order
from napari_sam3.masks.paint import paint_frame
from napari_sam3.plugin.writers import LabelMask
from napari_sam3.scene import SceneMask

SHAPE = (23, 17)


def _pixel_sets() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    rows, cols = SHAPE
    sets = [np.zeros(SHAPE, bool), np.ones(SHAPE, bool)]
    single = np.zeros(SHAPE, bool)
    single[rows - 1, cols - 1] = True
    sets.append(single)
    band = np.zeros(SHAPE, bool)
    band[5:9] = True  # full-width rows: runs continue from one row onto the next
    band[9, :3] = True
    sets.append(band)
    for _ in range(6):
        blob = rng.random(SHAPE) < rng.uniform(0.05, 0.6)
        blob[:, : rng.integers(0, cols)] = False
        sets.append(blob)
    return sets


def _kinds(dense: np.ndarray) -> dict[str, object]:
    square = Letterbox(SHAPE, max(SHAPE))  # model pixels = image pixels along both axes
    model = np.zeros((square.size, square.size), bool)
    model[: SHAPE[0], : SHAPE[1]] = dense
    assert square.resized_shape == SHAPE
    return {
        "RleMask": RleMask.from_dense(dense),
        "FrameMask": FrameMask(RleMask.from_dense(model), square),
        "SceneMask": SceneMask.from_crop(dense, 0, 0, SHAPE),
        "LabelMask": LabelMask(SHAPE, np.flatnonzero(dense)),
        "ArrayMask": as_mask(dense.astype(np.uint8)),
    }


def _reference_crop(dense: np.ndarray):
    rows, cols = np.flatnonzero(dense.any(axis=1)), np.flatnonzero(dense.any(axis=0))
    if rows.size == 0:
        return 0, 0, np.zeros((0, 0), bool), (0, 0, 0, 0)
    r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    return r0, c0, dense[r0:r1, c0:c1], (c0, r0, c1, r1)


@pytest.mark.parametrize("index", range(10))
def test_every_mask_kind_gives_the_same_pixels(index):
    dense = _pixel_sets()[index]
    r0, c0, crop, bbox = _reference_crop(dense)
    pad = 20  # windows may reach outside the frame, where a mask is False
    padded = np.zeros((SHAPE[0] + 2 * pad, SHAPE[1] + 2 * pad), bool)
    padded[pad:-pad, pad:-pad] = dense
    windows = [(-5, -5, SHAPE[0] + 5, SHAPE[1] + 5), (3, 2, 11, 16), (20, 0, 40, 3), (4, 4, 4, 9)]
    for name, mask in _kinds(dense).items():
        assert mask.shape == SHAPE, name
        assert mask.area == dense.sum(), name
        assert tuple(mask.bbox) == bbox, name
        got_r0, got_c0, got_crop = mask.crop()
        assert (got_r0, got_c0) == (r0, c0), name
        np.testing.assert_array_equal(got_crop, crop, err_msg=name)
        np.testing.assert_array_equal(mask.to_dense(), dense, err_msg=name)
        np.testing.assert_array_equal(np.asarray(mask), dense, err_msg=name)
        assert mask.to_rle() == RleMask.from_dense(dense), name
        for a, b, c, d in windows:
            expected = padded[a + pad : c + pad, b + pad : d + pad]
            np.testing.assert_array_equal(mask.window(a, b, c, d), expected, err_msg=name)


def test_frame_mask_crop_maps_only_the_model_crop():
    """A downsampled letterbox: the crop taken from the model-space crop equals the full map."""
    rng = np.random.default_rng(11)
    lb = Letterbox((250, 190), 64)
    for _ in range(20):
        model = np.zeros((64, 64), bool)
        r, c = rng.integers(0, 64, 2)
        model[r : r + rng.integers(1, 20), c : c + rng.integers(1, 20)] = True
        mask = FrameMask(RleMask.from_dense(model), lb)
        dense = lb.mask_to_image(model)
        r0, c0, crop, bbox = _reference_crop(dense)
        got = mask.crop()
        assert got[:2] == (r0, c0) and tuple(mask.bbox) == bbox
        np.testing.assert_array_equal(got[2], crop)
        assert mask.area == dense.sum()
        assert mask.to_rle() == RleMask.from_dense(dense)


def test_rle_from_crop_and_from_intervals_check_their_input():
    with pytest.raises(ValueError, match="does not fit"):
        RleMask.from_crop(np.ones((3, 3), bool), 2, 0, (4, 4))
    with pytest.raises(ValueError, match="sorted"):
        RleMask.from_intervals([5, 1], [6, 2], (4, 4))
    with pytest.raises(ValueError, match="outside"):
        RleMask.from_intervals([14], [17], (4, 4))
    with pytest.raises(ValueError, match="bool"):
        as_mask(np.full(SHAPE, 0.5))


def test_one_painter_for_every_kind_and_the_score_rule():
    sets = _pixel_sets()[2:]
    scores = np.array([0.5, 0.9, 0.9, 0.1, np.nan, 0.7, 0.9, 0.2], dtype=np.float32)
    reference = np.zeros(SHAPE, np.int32)
    # Ascending score, later rows first among ties, NaN lowest: the highest, earliest row on top.
    for i in sorted(range(len(sets)), key=lambda i: (np.nan_to_num(scores[i], nan=-1), -i)):
        reference[sets[i]] = i + 1
    order = score_order(scores, len(sets))
    for name in ("RleMask", "FrameMask", "SceneMask", "LabelMask", "ArrayMask"):
        masks = [_kinds(d)[name] for d in sets]
        np.testing.assert_array_equal(paint_labels(masks, SHAPE, order), reference, err_msg=name)
    frame = pd.DataFrame({"score": scores, "mask": [ArrayMask(d) for d in sets]})
    labels, _, _ = paint_frame(frame)
    np.testing.assert_array_equal(labels, reference)
    # Without scores the earlier row wins everywhere.
    first_wins = np.zeros(SHAPE, np.int32)
    for i in reversed(range(len(sets))):
        first_wins[sets[i]] = i + 1
    np.testing.assert_array_equal(paint_frame(frame[["mask"]])[0], first_wins)


def test_dedup_takes_any_mask_kind_and_respects_groups_and_exemptions():
    dense = _pixel_sets()[3]  # the band
    inner = np.zeros(SHAPE, bool)
    inner[6:8, 2:10] = True  # nested in the band
    far = np.zeros(SHAPE, bool)
    far[15:20, 10:15] = True
    masks = [dense, inner, far]
    scores = [0.9, 0.8, 0.7]
    for name in ("RleMask", "FrameMask", "SceneMask", "LabelMask", "ArrayMask"):
        kinds = [_kinds(d)[name] for d in masks]
        assert dedup_masks(kinds, scores, 0.85).tolist() == [0, 2], name
    assert dedup_masks(np.stack(masks), scores, 0.85, groups=[0, 1, 0]).tolist() == [0, 1, 2]
    assert dedup_masks(np.stack(masks), scores, 0.85, exempt=[4, 4, -1]).tolist() == [0, 1, 2]
    assert dedup_masks(np.stack(masks), scores, 0.85, exempt=[-1, -1, 4]).tolist() == [0, 2]
    with pytest.raises(ValueError, match="groups must be 3 integers"):
        dedup_masks(np.stack(masks), scores, 0.85, groups=[0, 1])

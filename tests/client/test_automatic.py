"""Automatic mask generation (`napari_sam3.client.automatic`) on a synthetic decoder with known answers.

The decoder stands in for the PVS grid graph: a scene of rectangles; a click inside one answers
three candidates (the rectangle, a blurry copy, a grown copy with a low predicted IoU), a click
on the background answers the whole image. The generator must return each clicked rectangle
once, whatever the batch size, and nothing else.
"""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3.client.automatic import (
    generate_masks,
    point_grid,
    stability_score,
    upscale_logits,
)
from napari_sam3.runtime.postprocess import upsample_logits

S = 64  # model input side
M = 16  # low-res side (S / 4, as the real head: 288 for 1008)


def rect_logits(rect, grow: float = 0.0, sharpness: float = 400.0) -> np.ndarray:
    """Low-res logits of a rectangle (x1, y1, x2, y2, model-input pixels): a clipped signed
    distance sampled at the low-res pixel centres (steep: stable once upscaled)."""
    x1, y1, x2, y2 = rect
    x1, y1, x2, y2 = x1 - grow, y1 - grow, x2 + grow, y2 + grow
    c = (np.arange(M) + 0.5) * (S / M)
    dx = np.minimum(c - x1, x2 - c)[None, :]
    dy = np.minimum(c - y1, y2 - c)[:, None]
    return sharpness * np.clip(np.minimum(dx, dy) / 4.0, -1.0, 1.0)


class Scene:
    def __init__(self, rects) -> None:
        self.rects = [tuple(float(v) for v in r) for r in rects]
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def truth(self, i: int, shape=(S, S)) -> np.ndarray:
        x1, y1, x2, y2 = self.rects[i]
        ys, xs = np.mgrid[: shape[0], : shape[1]] + 0.5
        return (xs > x1) & (xs < x2) & (ys > y1) & (ys < y2)

    def __call__(self, coords: np.ndarray, labels: np.ndarray):
        self.calls.append((coords.copy(), labels.copy()))
        b = len(coords)
        logits = np.zeros((b, 3, M, M), np.float32)
        iou = np.zeros((b, 3), np.float32)
        for n, (x, y) in enumerate(coords[:, 0]):
            hit = [
                i for i, (x1, y1, x2, y2) in enumerate(self.rects) if x1 < x < x2 and y1 < y < y2
            ]
            if hit:
                r = self.rects[hit[0]]
                logits[n] = [rect_logits(r), rect_logits(r, sharpness=0.5), rect_logits(r, grow=5)]
                iou[n] = [0.95 - 0.01 * hit[0], 0.9, 0.5]
            else:
                logits[n] = [np.full((M, M), 8.0), np.full((M, M), -8.0), np.full((M, M), -8.0)]
                iou[n] = [0.85, 0.3, 0.3]
        return logits, iou


RECTS = [(4, 4, 28, 20), (36, 8, 60, 40), (8, 36, 30, 58), (44, 50, 47, 53)]


def best_iou(mask: np.ndarray, scene: Scene, shape=(S, S)) -> tuple[int, float]:
    scores = []
    for i in range(len(scene.rects)):
        t = scene.truth(i, shape)
        scores.append((mask & t).sum() / max((mask | t).sum(), 1))
    return int(np.argmax(scores)), float(max(scores))


# -- point grid -------------------------------------------------------------------------------


def test_point_grid_is_sams_cell_centres():
    g = point_grid(4)
    assert g.shape == (16, 2)
    side = np.array([0.125, 0.375, 0.625, 0.875])
    np.testing.assert_allclose(g[:4, 0], side)  # x varies fastest
    np.testing.assert_allclose(g[:4, 1], 0.125)
    np.testing.assert_allclose(g[::4, 1], side)
    np.testing.assert_allclose(point_grid(1), [[0.5, 0.5]])
    assert point_grid(16).shape == (256, 2)
    assert (point_grid(16) > 0).all() and (point_grid(16) < 1).all()


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_point_grid_refuses_bad_sides(bad):
    with pytest.raises((ValueError, TypeError)):
        point_grid(bad)


# -- upscaling and stability ------------------------------------------------------------------


def test_upscale_by_hand():
    # 1 x 2 -> 1 x 4 with half-pixel centres: source positions 0 (clamped), 0.25, 0.75, 1
    out = upscale_logits(np.array([[[0.0, 1.0]]], np.float32), 4, crop=(1, 4))
    np.testing.assert_allclose(out[0, 0], [0.0, 0.25, 0.75, 1.0], atol=1e-7)


def test_upscale_agrees_with_the_servers_separable_matmul():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 5, (5, M, M)).astype(np.float32)
    ours = upscale_logits(logits, S)
    theirs = upsample_logits(logits, S)
    assert ours.shape == (5, S, S) and ours.dtype == np.float32
    assert float(np.abs(ours - theirs).max()) <= 1e-5


def test_upscale_crop_is_the_top_left_of_the_full_result():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 5, (2, M, M)).astype(np.float32)
    full = upscale_logits(logits, 50)
    np.testing.assert_array_equal(upscale_logits(logits, 50, crop=(37, 21)), full[:, :37, :21])
    np.testing.assert_allclose(upscale_logits(np.full((1, M, M), 3.0), 50), 3.0, atol=1e-6)


def test_stability_score():
    logits = np.array([[2.0, 0.5, -0.5, -2.0], [-3, -3, -3, -3], [5, 5, -5, -5]], np.float32)
    np.testing.assert_allclose(stability_score(logits, 0.0, 1.0), [1 / 3, 0.0, 1.0])
    np.testing.assert_allclose(stability_score(logits, 0.0, 0.0), [1.0, 0.0, 1.0])
    np.testing.assert_allclose(stability_score(logits, 1.0, 1.0), [0.0, 0.0, 1.0])


# -- the generator ----------------------------------------------------------------------------


def test_every_clicked_object_once():
    scene = Scene(RECTS)
    out = generate_masks(scene, S, points_per_side=8, batch=64)
    masks = out["masks"]
    assert masks.shape == (S, S)
    # The 3x3 px rectangle gets no grid point; the background mask contains every object and
    # the blurry / grown candidates fail stability / predicted IoU.
    assert len(masks) == 3
    found = sorted(best_iou(masks[i], scene)[0] for i in range(len(masks)))
    assert found == [0, 1, 2]
    for i in range(len(masks)):
        assert best_iou(masks[i], scene)[1] > 0.9
    assert np.all(np.diff(out["iou"]) <= 0)  # best first
    np.testing.assert_allclose(out["iou"], [0.95, 0.94, 0.93], atol=1e-6)
    assert (out["stability"] >= 0.95).all()
    np.testing.assert_array_equal(out["areas"], [m.sum() for m in masks])
    for box, m in zip(out["boxes"], masks, strict=True):
        ys, xs = np.nonzero(m)
        np.testing.assert_array_equal(box, [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
    for point, box in zip(out["points"], out["boxes"], strict=True):
        assert box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]
    c = out["counts"]
    assert c["points"] == 64 and c["candidates"] == 192
    # 16 clicks hit a rectangle (2 candidates pass the predicted IoU), 48 the background (1)
    assert c["iou"] == 80
    assert c["stability"] == c["area"] == 64  # the blurry copies are unstable
    assert c["nms"] == 4  # one per rectangle plus the whole image
    assert c["dedup"] == 3  # the whole image contains the rectangles


@pytest.mark.parametrize("batch", [1, 7, 64, 1000])
def test_batch_size_changes_nothing(batch):
    ref = generate_masks(Scene(RECTS), S, points_per_side=8, batch=64)
    scene = Scene(RECTS)
    out = generate_masks(scene, S, points_per_side=8, batch=batch)
    for key in ("iou", "stability", "boxes", "points", "areas"):
        np.testing.assert_array_equal(out[key], ref[key], err_msg=key)
    np.testing.assert_array_equal(out["masks"].to_dense(), ref["masks"].to_dense())
    assert len(scene.calls) == -(-64 // batch)
    for coords, labels in scene.calls:
        assert coords.dtype == np.float32 and coords.ndim == 3 and coords.shape[1:] == (1, 2)
        assert labels.dtype == np.float32 and labels.shape == coords.shape[:2]
        assert (labels == 1).all()


def test_thresholds_are_overridable():
    scene = Scene(RECTS)
    # Keeping low predicted IoU lets the grown copies in; they contain the rectangles, and
    # dedup keeps the better scored of each pair.
    loose = generate_masks(scene, S, points_per_side=8, pred_iou_thresh=0.0)
    assert loose["counts"]["iou"] == 192
    assert loose["counts"]["stability"] == 80
    assert len(loose["masks"]) == 3
    # Without the stability filter the blurry copies pass, then lose to NMS.
    soft = generate_masks(scene, S, points_per_side=8, stability_score_thresh=0.0)
    assert soft["counts"]["stability"] == 80
    assert len(soft["masks"]) == 3
    # min_area removes the masks below it (the rectangles have about 384, 768, 484 pixels).
    big_only = generate_masks(scene, S, points_per_side=8, min_area=400)
    assert len(big_only["masks"]) == 2 and (big_only["areas"] >= 400).all()
    assert len(generate_masks(scene, S, points_per_side=8, min_area=500)["masks"]) == 1


def test_overlapping_objects_nms_and_dedup_thresholds():
    # Two rectangles overlapping: box IoU 0.56, overlap coefficient 0.77.
    scene = Scene([(4, 4, 30, 30), (10, 4, 40, 30)])
    assert len(generate_masks(scene, S, points_per_side=8)["masks"]) == 2
    assert len(generate_masks(scene, S, points_per_side=8, box_nms_thresh=0.5)["masks"]) == 1
    assert len(generate_masks(scene, S, points_per_side=8, dedup_threshold=0.7)["masks"]) == 1


def test_deterministic():
    a = generate_masks(Scene(RECTS), S, points_per_side=8)
    b = generate_masks(Scene(RECTS), S, points_per_side=8)
    np.testing.assert_array_equal(a["masks"].to_dense(), b["masks"].to_dense())
    np.testing.assert_array_equal(a["iou"], b["iou"])


def test_valid_shape_limits_points_and_masks():
    scene = Scene(RECTS)
    out = generate_masks(scene, S, points_per_side=8, valid_shape=(40, 64))
    assert out["masks"].shape == (40, 64)
    for coords, _ in scene.calls:
        assert (coords[..., 1] < 40).all() and (coords[..., 0] < 64).all()
    # Rectangle 2 (y from 36) is cut by the content edge at y=40; its clicks at y=37.5 find it.
    found = sorted(best_iou(out["masks"][i], scene, (40, 64)) for i in range(len(out["masks"])))
    assert [k for k, _ in found] == [0, 1, 2]
    assert all(score > 0.9 for _, score in found)


def test_nothing_found():
    def blank(coords, labels):
        b = len(coords)
        return np.full((b, 3, M, M), -5.0, np.float32), np.full((b, 3), 0.99, np.float32)

    out = generate_masks(blank, S, points_per_side=4)
    assert len(out["masks"]) == 0 and out["masks"].shape == (S, S)
    assert out["boxes"].shape == (0, 4) and out["points"].shape == (0, 2)
    assert out["iou"].shape == out["stability"].shape == out["areas"].shape == (0,)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"points_per_side": 0},
        {"batch": 0},
        {"pred_iou_thresh": 1.5},
        {"stability_score_thresh": -0.1},
        {"stability_score_offset": -1.0},
        {"box_nms_thresh": 2.0},
        {"dedup_threshold": 0.0},
        {"valid_shape": (S + 1, S)},
        {"valid_shape": (0, S)},
    ],
)
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        generate_masks(Scene(RECTS), S, **kwargs)


@pytest.mark.parametrize(
    "shapes",
    [((4, 3, M, M), (4, 2)), ((3, 3, M, M), (3, 3)), ((4, M, M), (4, 3))],
)
def test_decode_with_wrong_shapes_is_a_clear_error(shapes):
    logit_shape, iou_shape = shapes

    def wrong(coords, labels):
        return np.zeros(logit_shape, np.float32), np.zeros(iou_shape, np.float32)

    with pytest.raises(ValueError, match="decode must return"):
        generate_masks(wrong, S, points_per_side=2, batch=4)

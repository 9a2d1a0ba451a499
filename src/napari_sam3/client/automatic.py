"""Automatic mask generation ("everything" mode) on SAM3's interactive (PVS) head.

Engine-agnostic and pure numpy: the engine supplies `decode(point_coords, point_labels) ->
(low_res_logits, iou)` running the PVS grid graph against image features it has already
computed (one encoder pass, however many prompts), and everything else happens here, so the
embedded ONNX Runtime engine and a Triton server produce the same masks from the same logits.

The pipeline is SAM's automatic mask generator for a single crop:

1. a `points_per_side` x `points_per_side` grid of single positive clicks over the image
   content (cell centres, as SAM's `build_point_grid`), decoded `batch` prompts at a time, each
   giving 3 candidates;
2. candidates whose predicted IoU is not above `pred_iou_thresh` are dropped;
3. the rest are upscaled to model-input pixels (bilinear, half-pixel centres: torch's
   `interpolate(mode="bilinear", align_corners=False)`, as the official predictor's
   `postprocess_masks`), cropped to the image content, and dropped unless their stability score
   (IoU of the mask thresholded at `mask_threshold + offset` and at `mask_threshold - offset`)
   reaches `stability_score_thresh`;
4. masks (`logits > mask_threshold`) smaller than `min_area` pixels are dropped;
5. box non-maximum suppression at `box_nms_thresh`, then the overlap-coefficient deduplication
   of `napari_sam3.masks.dedup` at `dedup_threshold` (drops near-duplicates and nested masks),
   both ranked by predicted IoU.

Defaults are SAM2's automatic generator's (`pred_iou_thresh` 0.8, `stability_score_thresh` 0.95,
offset 1.0, `box_nms_thresh` 0.7), except `points_per_side` (16 instead of 32: 256 prompts, a
quarter of the decoder work) and `min_area` (16 model-input pixels, a plain area filter; SAM's
`min_mask_region_area` instead removes small islands and holes, and is off by default).
Coordinates are model-input pixels (0..S), like every coordinate of the model contract.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput
from napari_sam3.masks import RleMasks, box_nms, dedup_masks
from napari_sam3.runtime.postprocess import upsample_logits as upscale_logits

POINTS_PER_SIDE = 16
PRED_IOU_THRESH = 0.8
STABILITY_SCORE_THRESH = 0.95
STABILITY_SCORE_OFFSET = 1.0
MASK_THRESHOLD = 0.0
BOX_NMS_THRESH = 0.7
DEDUP_THRESHOLD = 0.85
MIN_AREA = 16
BATCH = 64  # prompts per decode call (SAM's points_per_batch)
UPSCALE_CHUNK = 16  # candidates upscaled at once: bounds memory (16 x S^2 float32)

Decode = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def point_grid(points_per_side: int) -> np.ndarray:
    """[n*n, 2] (x, y) cell centres of an n x n grid over [0, 1]^2, x varying fastest."""
    n = validate.points_per_side(points_per_side)
    offset = 1.0 / (2 * n)
    side = np.linspace(offset, 1.0 - offset, n)
    xs, ys = np.meshgrid(side, side)
    return np.stack([xs.ravel(), ys.ravel()], axis=-1)


def stability_score(
    logits: np.ndarray,
    mask_threshold: float = MASK_THRESHOLD,
    offset: float = STABILITY_SCORE_OFFSET,
) -> np.ndarray:
    """SAM's stability: |logits > thr + offset| / |logits > thr - offset| per mask, [N, ...] ->
    [N]. A mask empty at the lower threshold scores 0 (SAM gets 0/0 there)."""
    logits = np.asarray(logits)
    flat = logits.reshape(len(logits), int(np.prod(logits.shape[1:])))
    inter = np.count_nonzero(flat > mask_threshold + offset, axis=1)
    union = np.count_nonzero(flat > mask_threshold - offset, axis=1)
    return np.divide(inter, union, out=np.zeros(len(flat), np.float64), where=union > 0).astype(
        np.float32
    )


def generate_masks(
    decode: Decode,
    image_size: int,
    points_per_side: int = POINTS_PER_SIDE,
    *,
    pred_iou_thresh: float = PRED_IOU_THRESH,
    stability_score_thresh: float = STABILITY_SCORE_THRESH,
    stability_score_offset: float = STABILITY_SCORE_OFFSET,
    mask_threshold: float = MASK_THRESHOLD,
    box_nms_thresh: float = BOX_NMS_THRESH,
    dedup_threshold: float = DEDUP_THRESHOLD,
    min_area: int = MIN_AREA,
    batch: int = BATCH,
    valid_shape: tuple[int, int] | None = None,
) -> dict:
    """Segment everything: see the module docstring for the steps and the defaults.

    `decode(point_coords [b,1,2] float32, point_labels [b,1] float32)` returns the low-res
    logits [b,K,m,m] and predicted IoU [b,K] of each prompt's K candidates. `image_size` is the
    model input side S; `valid_shape` = (rows, cols) is the image content inside the letterboxed
    input (top-left; default: all of it). Points, masks and boxes live in that region.

    Returns a dict, best predicted IoU first: `masks` (`RleMasks` of shape `valid_shape`),
    `iou` float32 [N], `stability` float32 [N], `boxes` float32 [N,4] (x1, y1, x2, y2 pixel
    edges, x2/y2 exclusive), `points` float32 [N,2] (the click that made each mask), `areas`
    int64 [N], and `counts` (how many candidates each step kept).
    """
    size = validate.positive_int("image_size", image_size)
    rows, cols = (size, size) if valid_shape is None else (int(v) for v in valid_shape)
    if not (0 < rows <= size and 0 < cols <= size):
        raise InvalidInput(f"valid_shape {valid_shape} must lie within the {size}x{size} input")
    batch = validate.positive_int("batch", batch)
    min_area = validate.integer("min_area", min_area, 0)
    validate.unit_interval("pred_iou_thresh", pred_iou_thresh)
    validate.unit_interval("stability_score_thresh", stability_score_thresh)
    validate.unit_interval("box_nms_thresh", box_nms_thresh)
    validate.unit_interval("dedup_threshold", dedup_threshold, open_low=True)
    validate.non_negative("stability_score_offset", stability_score_offset)
    validate.number("mask_threshold", mask_threshold)

    points = (point_grid(points_per_side) * np.array([cols, rows])).astype(np.float32)
    counts = {"points": len(points), "candidates": 0, "iou": 0, "stability": 0, "area": 0}
    kept_masks: list = []
    kept = {"iou": [], "stability": [], "points": []}
    for start in range(0, len(points), batch):
        chunk = points[start : start + batch]
        low_res, iou = _decode(decode, chunk)
        k = iou.shape[1]
        counts["candidates"] += iou.size
        flat_logits = low_res.reshape(-1, *low_res.shape[2:])
        flat_iou = iou.reshape(-1)
        flat_points = np.repeat(chunk, k, axis=0)
        take = np.flatnonzero(flat_iou > pred_iou_thresh)
        counts["iou"] += take.size
        for sub in range(0, take.size, UPSCALE_CHUNK):
            idx = take[sub : sub + UPSCALE_CHUNK]
            logits = upscale_logits(flat_logits[idx], size, crop=(rows, cols))
            stable = stability_score(logits, mask_threshold, stability_score_offset)
            ok = stable >= stability_score_thresh
            counts["stability"] += int(ok.sum())
            masks = logits[ok] > mask_threshold
            areas = np.count_nonzero(masks.reshape(len(masks), rows * cols), axis=1)
            big = (areas >= max(min_area, 1)).nonzero()[0]
            counts["area"] += big.size
            if big.size:
                kept_masks.extend(RleMasks.from_dense(masks[big]).as_list())
                kept["iou"].append(flat_iou[idx][ok][big])
                kept["stability"].append(stable[ok][big])
                kept["points"].append(flat_points[idx][ok][big])

    if not kept_masks:
        return _result(
            RleMasks.stack([], shape=(rows, cols)),
            np.zeros(0),
            np.zeros(0),
            np.zeros((0, 2)),
            counts,
        )
    masks = RleMasks.stack(kept_masks)
    iou = np.concatenate(kept["iou"]).astype(np.float32)
    stable = np.concatenate(kept["stability"])
    pts = np.concatenate(kept["points"])

    order = box_nms(masks.bboxes, iou, box_nms_thresh)
    counts["nms"] = order.size
    masks, iou, stable, pts = masks.take(order), iou[order], stable[order], pts[order]
    order = dedup_masks(masks, iou, dedup_threshold)
    counts["dedup"] = order.size
    return _result(masks.take(order), iou[order], stable[order], pts[order], counts)


def _result(masks: RleMasks, iou, stability, points, counts: dict) -> dict:
    n = len(masks)
    counts.setdefault("nms", 0)
    counts.setdefault("dedup", 0)
    return {
        "masks": masks,
        "iou": np.asarray(iou, np.float32).reshape(n),
        "stability": np.asarray(stability, np.float32).reshape(n),
        "boxes": np.asarray(masks.bboxes, np.float32).reshape(n, 4),
        "points": np.asarray(points, np.float32).reshape(n, 2),
        "areas": np.asarray(masks.areas, np.int64).reshape(n),
        "counts": counts,
    }


def _decode(decode: Decode, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    coords = np.ascontiguousarray(chunk[:, None, :], dtype=np.float32)
    labels = np.ones((len(chunk), 1), np.float32)
    low_res, iou = decode(coords, labels)
    low_res = np.asarray(low_res, np.float32)
    iou = np.asarray(iou, np.float32)
    b = len(chunk)
    if low_res.ndim != 4 or low_res.shape[0] != b or iou.shape != low_res.shape[:2]:
        raise InvalidInput(
            f"decode must return logits [{b}, K, m, m] and IoU [{b}, K] for {b} prompts, "
            f"got {low_res.shape} and {iou.shape}"
        )
    return low_res, iou

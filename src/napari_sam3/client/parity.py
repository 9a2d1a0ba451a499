"""How two results of the same prompt compare (one runtime or precision against another).

`compare_detections` for grounding results (every query returned on both sides: `score_thr=0`,
`dedup=None`), `compare_candidates` for an interactive prompt's three candidates. Both return
plain figures; the bounds belong to whoever calls them (tests/runtimes, bench/bf16_parity.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment

from napari_sam3.core.errors import InvalidInput


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def _dense(frame: pd.DataFrame) -> list[np.ndarray]:
    return [np.asarray(m.to_dense(), bool) for m in frame["mask"]]


def compare_detections(
    ref: pd.DataFrame, got: pd.DataFrame, top_k: int = 5, min_area: int = 50
) -> dict:
    """Detections matched one to one by box (Hungarian, L1), then: the largest box shift (sum
    over the 4 coordinates, image pixels), the largest score difference, the smallest mask IoU
    over masks of at least `min_area` pixels on either side, and how many of `ref`'s top-k by
    score are in `got`'s top-k."""
    if len(ref) != len(got):
        raise InvalidInput(f"the results differ in length ({len(ref)} vs {len(got)} detections)")
    if len(ref) == 0:
        raise InvalidInput("nothing to compare: no detections")
    ref_boxes, got_boxes = np.stack(ref["box"]), np.stack(got["box"])
    cost = np.abs(ref_boxes[:, None] - got_boxes[None]).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    ref_masks, got_masks = _dense(ref), _dense(got)
    ref_scores, got_scores = ref["score"].to_numpy(), got["score"].to_numpy()
    ious = [
        mask_iou(ref_masks[r], got_masks[c])
        for r, c in zip(rows, cols, strict=True)
        if max(ref_masks[r].sum(), got_masks[c].sum()) >= min_area
    ]
    ref_top = set(np.argsort(-ref_scores, kind="stable")[:top_k].tolist())
    got_top = set(np.argsort(-got_scores, kind="stable")[:top_k].tolist())
    matched = dict(zip(rows.tolist(), cols.tolist(), strict=True))
    return {
        "detections": len(ref),
        "box_shift": float(cost[rows, cols].max()),
        "score_diff": float(np.abs(ref_scores[rows] - got_scores[cols]).max()),
        "min_mask_iou": min(ious) if ious else 1.0,
        "masks_compared": len(ious),
        "topk_agree": sum(matched[r] in got_top for r in ref_top),
        "top_k": min(top_k, len(ref)),
    }


def compare_candidates(ref: pd.DataFrame, got: pd.DataFrame) -> dict:
    """An interactive prompt's candidates (frames ordered by predicted IoU, best first): each of
    `ref`'s matched to `got`'s by mask IoU; the largest predicted-IoU difference, the smallest
    mask IoU, whether the ranking is the same, and fp32's smallest gap between neighbours."""
    ref_iou, got_iou = ref["iou"].to_numpy(), got["iou"].to_numpy()
    ious = np.array([[mask_iou(a, b) for b in _dense(got)] for a in _dense(ref)])
    rows, cols = linear_sum_assignment(-ious)
    match = cols[np.argsort(rows)]
    return {
        "iou_pred_diff": float(np.abs(ref_iou - got_iou[match]).max()),
        "min_mask_iou": float(ious[np.arange(len(match)), match].min()),
        "same_ranking": bool(np.all(np.diff(match) > 0)),
        "ref_min_gap": float(np.min(-np.diff(ref_iou))) if len(ref_iou) > 1 else float("inf"),
        "match": match.tolist(),
        "ref_iou": ref_iou.tolist(),
        "got_iou": got_iou.tolist(),
    }

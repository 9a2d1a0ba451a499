"""What a graph's outputs decide, measured against a reference's, and the verdict by the bounds.

Scores (sigmoid(logit) x sigmoid(presence)), boxes, masks thresholded as the postprocess does,
keep/drop at score thresholds, dedup pair decisions and the library's dedup, interactive
candidates; `violations` holds them to `onnx_runner.PARITY_BOUNDS`. Used by `verify.py` (against
the PyTorch model) and bench/bf16_heads.py (bf16 against fp32).
"""

from __future__ import annotations

import numpy as np

from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner as R

BOUNDS = R.PARITY_BOUNDS


def scores_of(out) -> np.ndarray:
    from napari_sam3.runtime.postprocess import sigmoid

    logits = np.asarray(out[contract.PRED_LOGITS]).reshape(-1)
    presence = sigmoid(np.asarray(out[contract.PRESENCE_LOGIT]).reshape(-1)[:1])
    return (sigmoid(logits) * presence).astype(np.float64)


def masks_of(low_res, size: int, cut: float = 0.0):
    """The masks as the postprocess thresholds them (logit `cut` 0 = probability 0.5)."""
    from napari_sam3.runtime.postprocess import threshold_masks

    low = np.asarray(low_res, np.float32)
    return threshold_masks(low.reshape(-1, *low.shape[-2:]), size, cut)


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def _overlap_matrix(masks, index) -> np.ndarray:
    dense = masks.take(index).to_dense().reshape(len(index), -1).astype(np.float32)
    inter = dense @ dense.T
    area = dense.sum(axis=1)
    smaller = np.minimum(area[:, None], area[None, :])
    return np.divide(inter, smaller, out=np.zeros_like(inter), where=smaller > 0)


def compare_grounding(ref, got, size: int, thresholds=BOUNDS["score_thresholds"]) -> dict:
    """A grounding head's outputs against the reference's, by what the postprocess decides."""
    from napari_sam3.masks.dedup import dedup_masks

    top_n, dedup = BOUNDS["top"], BOUNDS["dedup"]
    s0, s1 = scores_of(ref), scores_of(got)
    flips = {f"flips@{t}": int(np.sum((s0 >= t) != (s1 >= t))) for t in thresholds}
    # a threshold between every two neighbouring reference scores: the decisions an analyst can ask for
    order = np.sort(s0)
    cuts = (order[1:] + order[:-1]) / 2
    flipped = [(np.sum((s0 >= c) != (s1 >= c))) for c in cuts]
    top = np.argsort(-s0, kind="stable")[:top_n]
    cut = _logit(BOUNDS["mask_thr"])
    m0 = masks_of(ref[contract.PRED_MASKS], size, cut)
    m1 = masks_of(got[contract.PRED_MASKS], size, cut)
    inter = [np.sum(m0.mask(int(i)).to_dense() & m1.mask(int(i)).to_dense()) for i in top.tolist()]
    union = [np.sum(m0.mask(int(i)).to_dense() | m1.mask(int(i)).to_dense()) for i in top.tolist()]
    iou = np.divide(inter, union, out=np.ones(len(top)), where=np.asarray(union) > 0)
    c0, c1 = _overlap_matrix(m0, top), _overlap_matrix(m1, top)
    upper = np.triu_indices(len(top), k=1)
    dedup_flips = int(np.sum((c0[upper] >= dedup) != (c1[upper] >= dedup)))
    kept0 = top[dedup_masks(m0.take(top), s0[top], dedup)]
    kept1 = top[dedup_masks(m1.take(top), s1[top], dedup)]
    boxes = np.abs(np.asarray(ref[contract.PRED_BOXES]) - np.asarray(got[contract.PRED_BOXES]))
    gaps = np.abs(np.diff(order))
    return {
        "max |d score|": float(np.abs(s1 - s0).max()),
        "median gap between fp32 scores": float(np.median(gaps)) if gaps.size else 0.0,
        "score range": [float(s0.min()), float(s0.max())],
        **flips,
        "neighbour cuts flipped": f"{int(np.count_nonzero(flipped))} of {len(cuts)}",
        "max |d box| (px)": float(boxes.max() * size),
        f"mask IoU top {top_n}: min / median": [float(iou.min()), float(np.median(iou))],
        f"dedup {dedup} pair decisions flipped (top {top_n})": f"{dedup_flips} of {upper[0].size}",
        "pairs within 0.02 of the dedup threshold (fp32)": int(
            np.sum(np.abs(c0[upper] - dedup) < 0.02)
        ),
        "dedup kept the same masks": bool(set(kept0.tolist()) == set(kept1.tolist())),
    }


def compare_pvs(ref, got, size: int) -> dict:
    """Interactive candidates (one row per prompt of a batch) against the reference's."""
    iou0 = np.asarray(ref[contract.PVS_DECODER_IOU]).reshape(-1, 3)
    iou1 = np.asarray(got[contract.PVS_DECODER_IOU]).reshape(-1, 3)
    cut = _logit(BOUNDS["mask_thr"])
    m0 = masks_of(ref[contract.PVS_DECODER_MASKS], size, cut).to_dense()
    m1 = masks_of(got[contract.PVS_DECODER_MASKS], size, cut).to_dense()
    inter = (m0 & m1).sum(axis=(1, 2))
    union = (m0 | m1).sum(axis=(1, 2))
    return {
        "max |d predicted IoU|": float(np.abs(iou1 - iou0).max()),
        "best candidate kept": bool(np.all(np.argmax(iou0, 1) == np.argmax(iou1, 1))),
        "gap between the two best predicted IoUs": float(np.ptp(np.sort(iou0, 1)[:, -2:], 1).min()),
        "mask IoU (3 candidates)": np.round(inter / np.maximum(union, 1), 4).tolist(),
    }


def relative(ref, got) -> dict:
    return {
        k: float(
            np.abs(np.asarray(got[k], np.float64) - ref[k]).max() / (np.abs(ref[k]).max() or 1)
        )
        for k in ref
        if np.asarray(ref[k]).dtype.kind == "f"
    }


def violations(measured: dict) -> list[str]:
    """Which of PARITY_BOUNDS one comparison breaks (empty: it holds)."""
    out = []
    if "max |d score|" in measured:
        if measured["max |d score|"] > BOUNDS["score"]:
            out.append(f"score off by {measured['max |d score|']:.4f} > {BOUNDS['score']}")
        for key, value in measured.items():
            if key.startswith("flips@") and value:
                out.append(f"{value} keep/drop decision(s) flipped at score {key[6:]}")
        low = measured[f"mask IoU top {BOUNDS['top']}: min / median"][0]
        if low < BOUNDS["mask_iou"]:
            out.append(f"mask IoU {low:.3f} < {BOUNDS['mask_iou']}")
        flipped = int(
            measured[
                f"dedup {BOUNDS['dedup']} pair decisions flipped (top {BOUNDS['top']})"
            ].split()[0]
        )
        if flipped:  # which of two duplicates is kept may change with their order: not counted
            out.append(f"{flipped} dedup pair decision(s) flipped at overlap {BOUNDS['dedup']}")
    if "best candidate kept" in measured:
        if not measured["best candidate kept"]:
            out.append("the best interactive candidate changed")
        low = min(candidate_ious(measured))
        if low < BOUNDS["mask_iou"]:
            out.append(f"candidate mask IoU {low:.3f} < {BOUNDS['mask_iou']}")
    return out


def candidate_ious(measured: dict) -> list[float]:
    values = np.asarray(measured["mask IoU (3 candidates)"], np.float64).reshape(-1)
    return values.tolist()


def compare(ref: dict, got: dict, size: int, thresholds) -> dict:
    if contract.PRED_LOGITS in ref:
        return compare_grounding(ref, got, size, thresholds)
    return compare_pvs(ref, got, size)

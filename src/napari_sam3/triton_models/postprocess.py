"""`sam3_postprocess`: grounding head outputs -> scores, boxes and RLE masks.

score = sigmoid(logit) * sigmoid(presence); detections above `score_thr`, at most `max_det`,
best first; their low-res mask logits upsampled bilinearly to the model's input size (as
torch's `interpolate(..., mode="bilinear", align_corners=False)`), thresholded at `mask_thr`
(a probability) and sent as the condensed RLE of docs/rle.md. No NMS here: deduplication is
the client's (it knows the original image and the user's `dedup` setting).
"""

from __future__ import annotations

import numpy as np

try:  # inside the napari_sam3 package
    from ..masks.rle import encode_masks
except ImportError:  # the copy beside the Triton model
    from rle import encode_masks

DEFAULT_SCORE_THR = 0.5
DEFAULT_MASK_THR = 0.5
DEFAULT_MAX_DET = 100
UPSAMPLE_CHUNK = 16  # masks upsampled at once: bounds memory at full size (16 x 1008^2 floats)


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return np.exp(-np.logaddexp(np.float32(0), -x)).astype(np.float32)


def bilinear_matrix(src: int, dst: int) -> np.ndarray:
    """[dst, src] weights of 1-D bilinear resizing with half-pixel centres (align_corners=False)."""
    scale = src / dst
    centres = np.clip((np.arange(dst, dtype=np.float64) + 0.5) * scale - 0.5, 0, None)
    lo = np.minimum(np.floor(centres).astype(np.int64), src - 1)
    hi = np.minimum(lo + 1, src - 1)
    frac = centres - lo
    weights = np.zeros((dst, src), dtype=np.float64)
    rows = np.arange(dst)
    np.add.at(weights, (rows, lo), 1 - frac)
    np.add.at(weights, (rows, hi), frac)
    return weights.astype(np.float32)


def upsample_logits(logits: np.ndarray, size: int) -> np.ndarray:
    """[N, m, m] low-res logits -> [N, size, size], bilinear, separable."""
    n, h, w = logits.shape
    rows, cols = bilinear_matrix(h, size), bilinear_matrix(w, size)
    return np.matmul(np.matmul(rows, logits.astype(np.float32)), cols.T)


def _scalar(inputs: dict, name: str, default, kind):
    if name not in inputs:
        return default
    value = np.asarray(inputs[name]).reshape(-1)
    if value.size != 1:
        raise ValueError(f"{name} must hold one value, got {value.size}")
    return kind(value[0])


def postprocess(
    pred_logits: np.ndarray,
    pred_boxes: np.ndarray,
    pred_masks: np.ndarray,
    presence_logit: np.ndarray,
    image_size: int,
    score_thr: float = DEFAULT_SCORE_THR,
    mask_thr: float = DEFAULT_MASK_THR,
    max_det: int = DEFAULT_MAX_DET,
) -> tuple[np.ndarray, np.ndarray, bytes]:
    """Returns scores [N], boxes [N,4] xyxy in model-input pixels and the RLE payload."""
    if not 0.0 <= score_thr <= 1.0:
        raise ValueError(f"score_thr must be within [0, 1], got {score_thr}")
    if not 0.0 < mask_thr < 1.0:
        raise ValueError(f"mask_thr must be within (0, 1), got {mask_thr}")
    if max_det < 0:
        raise ValueError(f"max_det must be >= 0, got {max_det}")
    logits = np.asarray(pred_logits, dtype=np.float32).reshape(-1)
    presence = sigmoid(np.asarray(presence_logit).reshape(-1)[:1])
    scores = sigmoid(logits) * presence
    order = np.argsort(-scores, kind="stable")
    order = order[scores[order] >= score_thr][:max_det]
    boxes = np.asarray(pred_boxes, dtype=np.float32).reshape(-1, 4)[order]
    boxes = np.clip(boxes, 0.0, 1.0) * np.float32(image_size)
    low_res = np.asarray(pred_masks, dtype=np.float32).reshape(len(logits), *pred_masks.shape[-2:])
    # Compare logits with logit(mask_thr): same as sigmoid(upsampled) > mask_thr, without exp.
    cut = np.float32(np.log(mask_thr) - np.log1p(-mask_thr))
    masks = np.zeros((len(order), image_size, image_size), dtype=bool)
    for start in range(0, len(order), UPSAMPLE_CHUNK):
        chunk = order[start : start + UPSAMPLE_CHUNK]
        masks[start : start + len(chunk)] = upsample_logits(low_res[chunk], image_size) > cut
    return scores[order].astype(np.float32), boxes.astype(np.float32), encode_masks(masks)


class Logic:
    def __init__(self, model_dir: str, parameters: dict) -> None:
        self.image_size = int(parameters["image_size"])

    def run(self, inputs: dict, call=None) -> dict:
        scores, boxes, payload = postprocess(
            inputs["pred_logits"],
            inputs["pred_boxes"],
            inputs["pred_masks"],
            inputs["presence_logit"],
            self.image_size,
            score_thr=_scalar(inputs, "score_thr", DEFAULT_SCORE_THR, float),
            mask_thr=_scalar(inputs, "mask_thr", DEFAULT_MASK_THR, float),
            max_det=_scalar(inputs, "max_det", DEFAULT_MAX_DET, int),
        )
        return {
            "scores": scores,
            "boxes": boxes,
            "masks_rle": np.frombuffer(payload, dtype=np.uint8),
        }

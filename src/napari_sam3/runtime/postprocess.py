"""`sam3_postprocess`: grounding head outputs -> scores, boxes and RLE masks.

score = sigmoid(logit) * sigmoid(presence); detections above `score_thr`, at most `max_det`,
best first; their low-res mask logits upsampled bilinearly to the model's input size (as
torch's `interpolate(..., mode="bilinear", align_corners=False)`), thresholded at `mask_thr`
(a probability) and sent as the condensed RLE of docs/rle.md. No NMS here: deduplication is
the client's (it knows the original image and the user's `dedup` setting).
"""

from __future__ import annotations

import numpy as np

if __package__:  # inside napari_sam3 (a real ImportError surfaces as it is)
    from napari_sam3.core.errors import InvalidInput
    from napari_sam3.masks import rle_kernels
    from napari_sam3.masks.rle import RleMasks, RlePayload
else:  # the copies beside the Triton model, where siblings are plain modules
    import rle_kernels
    from errors import InvalidInput
    from rle import RleMasks, RlePayload

DEFAULT_SCORE_THR = 0.5
DEFAULT_MASK_THR = 0.5
DEFAULT_MAX_DET = 100
# An interactive prompt's masks are its logits above 0 (SAM's predictor's mask_threshold).
INTERACTIVE_CUT = 0.0


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return np.exp(-np.logaddexp(np.float32(0), -x)).astype(np.float32)


def axis_weights(src: int, dst: int, keep: int | None = None):
    """Source indices (lo, hi) and weight of hi for 1-D bilinear resizing src -> dst with
    half-pixel centres (torch's align_corners=False), for the first `keep` output positions."""
    keep = dst if keep is None else keep
    centres = np.clip((np.arange(keep, dtype=np.float64) + 0.5) * (src / dst) - 0.5, 0.0, None)
    lo = np.minimum(np.floor(centres).astype(np.int64), src - 1)
    hi = np.minimum(lo + 1, src - 1)
    return lo, hi, (centres - lo).astype(np.float32)


def upsample_logits(
    logits: np.ndarray, size: int, crop: tuple[int, int] | None = None
) -> np.ndarray:
    """[N, m, m] low-res logits -> [N, size, size] float32 (bilinear, align_corners=False),
    or only its top-left `crop` = (rows, cols) region."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 3:
        raise InvalidInput(f"logits must be [N, h, w], got shape {logits.shape}")
    rows, cols = crop if crop is not None else (size, size)
    _, h, w = logits.shape
    lo, hi, f = axis_weights(h, size, rows)
    tall = logits[:, lo, :] * (1.0 - f)[None, :, None] + logits[:, hi, :] * f[None, :, None]
    lo, hi, f = axis_weights(w, size, cols)
    return tall[:, :, lo] * (1.0 - f) + tall[:, :, hi] * f


def threshold_crops(logits: np.ndarray, size: int, cut: float):
    """For each of the [N, m, m] low-res logits, (row, col, bool crop) of its upsampled mask
    (bilinear to [size, size]) > cut, computed only where it can be true; None where empty.

    A bilinear value is a convex mix of its neighbouring low-res samples, so outside the
    low-res pixels above `cut` (grown by one) it cannot exceed `cut`: exact, and far cheaper
    than upsampling whole masks at full size.
    """
    logits = np.asarray(logits, dtype=np.float32)
    n, h, w = logits.shape
    row_lo, row_hi, row_f = axis_weights(h, size)
    col_lo, col_hi, col_f = axis_weights(w, size)
    above = logits > cut
    busy = above.reshape(n, h * w).any(axis=1)
    crops = []
    for i in range(n):
        if not busy[i]:
            crops.append(None)
            continue
        rows = np.flatnonzero(above[i].any(axis=1))
        cols = np.flatnonzero(above[i].any(axis=0))
        r = np.flatnonzero((row_hi >= rows[0]) & (row_lo <= rows[-1]))
        c = np.flatnonzero((col_hi >= cols[0]) & (col_lo <= cols[-1]))
        # only the low-res columns the crop reads
        c0, c1 = int(col_lo[c[0]]), int(col_hi[c[-1]]) + 1
        window = logits[i, :, c0:c1]
        f = row_f[r][:, None]
        tall = window[row_lo[r]] * (1.0 - f) + window[row_hi[r]] * f
        g = col_f[c]
        values = tall[:, col_lo[c] - c0] * (1.0 - g) + tall[:, col_hi[c] - c0] * g
        crops.append((int(r[0]), int(c[0]), values > cut))
    return crops


def upsample_threshold(logits: np.ndarray, size: int, cut: float) -> np.ndarray:
    """bool [N, size, size]: upsampled logits > cut (see `threshold_crops`)."""
    crops = threshold_crops(logits, size, cut)
    out = np.zeros((len(crops), size, size), dtype=bool)
    for i, crop in enumerate(crops):
        if crop is not None:
            row, col, pixels = crop
            out[i, row : row + pixels.shape[0], col : col + pixels.shape[1]] = pixels
    return out


def threshold_masks(
    logits: np.ndarray, size: int, cut: float, order: np.ndarray | None = None
) -> RleMasks:
    """`upsample_threshold(logits[order], size, cut)` as a batch of masks, made from each mask's
    crop: no [N, size, size] array (200 full-size masks: 203 MB) is made or scanned. It holds
    their foreground intervals (runs are made when asked for). Where numba is installed a
    compiled kernel goes from logits to packed bits in one pass (identical masks; intervals and
    runs are made from the bits when asked for), reading the logits in place (no copy of the
    masks picked by `order`)."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 3:
        raise InvalidInput(f"logits must be [N, h, w], got shape {logits.shape}")
    picked = range(len(logits)) if order is None else np.asarray(order, dtype=np.int64)
    if not rle_kernels.ENABLED:
        return RleMasks.from_crops(threshold_crops(logits[picked], size, cut), (size, size))
    _, h, w = logits.shape
    rows, cols = axis_weights(h, size), axis_weights(w, size)
    packed, k, last_on = rle_kernels.threshold_bits(
        [logits[i] for i in picked],
        cut,
        (*rows[:2], 1.0 - rows[2], rows[2]),
        (*cols[:2], 1.0 - cols[2], cols[2]),
        size,
    )
    return RleMasks.from_packed(packed, k, last_on, (size, size))


def threshold_boxes(logits: np.ndarray, size: int, cut: float) -> np.ndarray:
    """`threshold_masks(logits, size, cut).bboxes` (int64 [N, 4]), without making the masks
    where the compiled kernels run: a mask is made only when it is looked at."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 3:
        raise InvalidInput(f"logits must be [N, h, w], got shape {logits.shape}")
    if not rle_kernels.ENABLED:
        return np.asarray(threshold_masks(logits, size, cut).bboxes, dtype=np.int64)
    _, h, w = logits.shape
    rows, cols = axis_weights(h, size), axis_weights(w, size)
    return rle_kernels.threshold_boxes(
        logits,
        cut,
        (*rows[:2], 1.0 - rows[2], rows[2]),
        (*cols[:2], 1.0 - cols[2], cols[2]),
        size,
    )


def encode_thresholded(logits: np.ndarray, size: int, cut: float) -> bytes:
    """The RLE payload of `upsample_threshold(logits, size, cut)` (see `threshold_masks`)."""
    return threshold_masks(logits, size, cut).to_bytes()


def scalar(inputs: dict, name: str, default, kind):
    """One option from a request (`default` where absent); exactly one value, as `kind`."""
    if name not in inputs:
        return default
    value = np.asarray(inputs[name]).reshape(-1)
    if value.size != 1:
        raise InvalidInput(f"{name} must hold one value, got {value.size}")
    return kind(value[0])


def postprocess(*args, **kwargs) -> tuple[np.ndarray, np.ndarray, bytes]:
    """`postprocess_masks` with the masks as the RLE payload: scores [N], boxes [N,4] xyxy in
    model-input pixels, payload bytes."""
    scores, boxes, masks = postprocess_masks(*args, **kwargs)
    return scores, boxes, masks.to_bytes()


def postprocess_masks(
    pred_logits: np.ndarray,
    pred_boxes: np.ndarray,
    pred_masks: np.ndarray,
    presence_logit: np.ndarray,
    image_size: int,
    score_thr: float = DEFAULT_SCORE_THR,
    mask_thr: float = DEFAULT_MASK_THR,
    max_det: int = DEFAULT_MAX_DET,
) -> tuple[np.ndarray, np.ndarray, RleMasks]:
    """`postprocess` with the masks as runs (no bytes). Survivors first: score_thr and max_det
    are decided on the scores alone, and only the detections kept are upsampled and thresholded."""
    if not 0.0 <= score_thr <= 1.0:
        raise InvalidInput(f"score_thr must be within [0, 1], got {score_thr}")
    if not 0.0 < mask_thr < 1.0:
        raise InvalidInput(f"mask_thr must be within (0, 1), got {mask_thr}")
    if max_det < 0:
        raise InvalidInput(f"max_det must be >= 0, got {max_det}")
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
    masks = threshold_masks(low_res, image_size, cut, order)
    return scores[order].astype(np.float32), boxes.astype(np.float32), masks


class Logic:
    def __init__(self, model_dir: str, parameters: dict) -> None:
        self.image_size = int(parameters["image_size"])

    def run(self, inputs: dict, call=None, outputs=None) -> dict:
        scores, boxes, masks = postprocess_masks(
            inputs["pred_logits"],
            inputs["pred_boxes"],
            inputs["pred_masks"],
            inputs["presence_logit"],
            self.image_size,
            score_thr=scalar(inputs, "score_thr", DEFAULT_SCORE_THR, float),
            mask_thr=scalar(inputs, "mask_thr", DEFAULT_MASK_THR, float),
            max_det=scalar(inputs, "max_det", DEFAULT_MAX_DET, int),
        )
        return {
            "scores": scores,
            "boxes": boxes,
            "masks_rle": RlePayload(masks),  # bytes only where it leaves the process
        }

"""Model-space results -> pandas DataFrames in the original image's pixels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from napari_sam3.core.columns import RESULT_COLUMNS
from napari_sam3.core.errors import BadData, InvalidInput
from napari_sam3.imagery.letterbox import Letterbox
from napari_sam3.masks.dedup import dedup_masks
from napari_sam3.masks.protocol import Crop, LazyMask, tight_crop
from napari_sam3.masks.rle import RleMask, RleMasks, as_rle_masks


class FrameMask(LazyMask):
    """A mask of the original image, kept as model-space RLE and made dense on access.

    `make` instead of `rle`: a callable that makes the model-space mask when it is first used
    (an interactive prompt's other candidates, which the analyst may never look at)."""

    __slots__ = ("_make", "_rle", "letterbox")

    def __init__(self, rle: RleMask | None, letterbox: Letterbox, make=None) -> None:
        if (rle is None) == (make is None):
            raise InvalidInput("a FrameMask needs its model-space mask or a way to make it")
        self._rle = rle
        self._make = make
        self.letterbox = letterbox

    @property
    def rle(self) -> RleMask:
        if self._rle is None:
            self._rle = self._make()
            self._make = None
        return self._rle

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.letterbox.image_shape)

    def crop(self) -> Crop:
        """The image pixels holding the mask, mapped from the model-space crop alone."""
        size = self.letterbox.size
        if not isinstance(self.rle, RleMask) or self.rle.shape != (size, size):
            return tight_crop(0, 0, self.to_dense())  # let mask_to_image explain the mismatch
        return tight_crop(*self.letterbox.crop_to_image(*self.rle.crop()))

    def to_dense(self) -> np.ndarray:
        return self.letterbox.mask_to_image(np.asarray(self.rle.to_dense(), dtype=bool))

    def __repr__(self) -> str:
        area = "not made yet" if self._rle is None else int(self._rle.area)
        return f"FrameMask(shape={self.shape}, model_area={area})"


def empty_result(extra: dict | None = None) -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in RESULT_COLUMNS})
    frame["score"] = frame["score"].astype(np.float32)
    for name, dtype in (extra or {}).items():
        frame[name] = pd.Series(dtype=dtype)
    return frame


def decode_answer(payload, size: int, max_count: int) -> RleMasks:
    """A server's RLE payload (or the embedded engine's masks, taken as they are), refused
    (from its header, before anything is allocated) unless it holds at most `max_count` masks
    of the model frame `size` x `size`."""
    return as_rle_masks(payload, (size, size), max_count)


def max_detections(num_queries: int, max_det: int | None) -> int:
    """The most detections one prompt can produce: the decoder's queries, or fewer by max_det."""
    return num_queries if max_det is None else min(int(max_det), num_queries)


def detections_frame(
    scores: np.ndarray,
    boxes: np.ndarray,
    masks: RleMasks | np.ndarray | bytes,
    letterbox: Letterbox,
    dedup: float | None,
    keyword: str,
    prompt_kind: str,
    max_count: int | None = None,
) -> pd.DataFrame:
    """Decode the RLE payload (unless decoded already), deduplicate, map boxes back; best first.

    `max_count`: the most rows the request can produce (scores, boxes and masks beyond it are a
    wrong answer, refused before decoding).
    """
    scores = np.asarray(scores, dtype=np.float32).reshape(-1)
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    if max_count is not None and len(scores) > max_count:
        raise BadData(
            f"server answered {len(scores)} detections, but this request makes at most "
            f"{max_count}: refused (wrong or corrupt server answer)"
        )
    if not isinstance(masks, RleMasks):
        masks = decode_answer(
            masks, letterbox.size, len(scores) if max_count is None else max_count
        )
    elif masks.shape != (letterbox.size, letterbox.size):
        raise BadData(
            f"server answered masks of {masks.shape[0]}x{masks.shape[1]}, but this model's frame "
            f"is {letterbox.size}x{letterbox.size}"
        )
    if len(masks) != len(scores) or len(boxes) != len(scores):
        raise BadData(
            f"server answered {len(scores)} scores, {len(boxes)} boxes and {len(masks)} masks"
        )
    keep = np.argsort(-scores, kind="stable")
    if dedup is not None and len(keep) > 1:
        keep = dedup_masks(masks, scores, threshold=dedup)
    if len(keep) == 0:
        return empty_result()
    image_boxes = letterbox.boxes_to_image(boxes[keep])
    return pd.DataFrame(
        {
            "box": list(image_boxes.astype(np.float32)),
            "score": scores[keep],
            "mask": [FrameMask(masks.mask(i), letterbox) for i in keep],
            "keyword": keyword,
            "prompt_kind": prompt_kind,
        }
    )

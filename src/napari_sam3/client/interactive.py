"""Interactive segmentation: encode once, then clicks, boxes and painted masks refine a mask.

The image features stay where the model runs (one feature cache keyed by the image's content,
on the server or in the embedded engine): every prompt sends only the prompt. Refinement works as SAM's
predictor: the previous best low-res logits go back in as the mask input.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from napari_sam3.client.cache import ModelSwitched
from napari_sam3.client.results import FrameMask, decode_answer
from napari_sam3.core import contract
from napari_sam3.core.errors import BadData, InvalidInput
from napari_sam3.masks.rle import RleMasks
from napari_sam3.runtime.postprocess import INTERACTIVE_CUT, threshold_boxes, threshold_masks

SEED_MASK_LOGIT = 10.0  # a painted seed mask enters as confident logits: +10 inside, -10 outside


@dataclass(frozen=True)
class PromptState:
    points: tuple[tuple[float, float], ...] = ()  # model-input pixels
    labels: tuple[int, ...] = ()
    box: tuple[float, float, float, float] | None = None  # model-input pixels
    mask_input: np.ndarray | None = field(default=None, compare=False)  # low-res logits
    kind: str = ""

    @property
    def empty(self) -> bool:
        return not self.points and self.box is None and self.mask_input is None


class InteractiveSession:
    def __init__(self, client, prepared) -> None:
        self.client = client
        self.prepared = prepared
        self.manifest = client.manifest
        self.manifest.require_interactive()
        self._history: list[tuple[PromptState, pd.DataFrame | None]] = []
        self._state = PromptState()
        self.result: pd.DataFrame | None = None
        self.model_id = client.model_id  # its prompts and mask inputs belong to this model
        # the features of an image seen before (by any prompt) are reused; see cache.py
        self.status = client._features.encode(prepared)

    @property
    def image_id(self) -> str:
        """The image's content key in the feature cache."""
        return self.client._features.key(self.prepared)

    def _request(self, inputs: dict, outputs) -> dict:
        if self.client.model_id == self.model_id:
            try:
                out, self.status = self.client._features.request(
                    self.prepared, "interactive", inputs, outputs
                )
                return out
            except ModelSwitched:
                if self.client.model_id == self.model_id:
                    raise
        raise self.client._changed(
            self.model_id,
            "this interactive session",
            "start a new one with client.interactive(image) (its prompts and masks belong to "
            "the old model)",
        ) from None

    @property
    def letterbox(self):
        return self.prepared.letterbox

    @property
    def prompts(self) -> PromptState:
        return self._state

    # -- prompts ----------------------------------------------------------------------------
    def add_point(self, xy, positive: bool = True) -> pd.DataFrame:
        """A click at (x, y) in the image's pixels; positive adds, negative removes."""
        if not isinstance(positive, bool | np.bool_):
            raise InvalidInput(f"positive must be True (add) or False (remove), got {positive!r}")
        point = np.asarray(xy, dtype=np.float64).reshape(-1)
        if point.shape != (2,) or not np.isfinite(point).all():
            raise InvalidInput(f"a point is (x, y) in pixels, got {xy!r}")
        rows, cols = self.letterbox.image_shape
        if not (0 <= point[0] < cols and 0 <= point[1] < rows):
            raise InvalidInput(
                f"point ({point[0]:g}, {point[1]:g}) lies outside the {cols}x{rows} image"
            )
        if len(self._state.points) >= self.manifest.pvs_points:
            raise InvalidInput(f"at most {self.manifest.pvs_points} points per object")
        model_xy = self.letterbox.points_to_model(point[None])[0]
        state = replace(
            self._state,
            points=(*self._state.points, (float(model_xy[0]), float(model_xy[1]))),
            labels=(*self._state.labels, 1 if positive else 0),
            kind="point",
        )
        return self._run(state)

    def add_box(self, box) -> pd.DataFrame:
        """A box [x1, y1, x2, y2] in the image's pixels (replaces the previous box)."""
        array = np.asarray(box, dtype=np.float64).reshape(-1)
        if array.shape != (4,) or not np.isfinite(array).all():
            raise InvalidInput(f"a box is [x1, y1, x2, y2] in pixels, got {box!r}")
        if array[2] <= array[0] or array[3] <= array[1]:
            raise InvalidInput(
                f"box {array.tolist()} is inverted or has zero area (need x2>x1, y2>y1)"
            )
        model_box = self.letterbox.boxes_to_model(array[None])[0]
        return self._run(replace(self._state, box=tuple(float(v) for v in model_box), kind="box"))

    def add_mask(self, mask) -> pd.DataFrame:
        """A painted seed mask (the image's shape) to start from or refine with.

        Boolean, or numbers that are all 0 or 1 (a label layer's 0/1); anything else, such as
        probabilities, is refused rather than guessed at: threshold it first (``mask > 0.5``).
        """
        mask = np.asarray(mask)
        if mask.shape != tuple(self.letterbox.image_shape):
            raise InvalidInput(
                f"the seed mask must have the image's shape {tuple(self.letterbox.image_shape)}, "
                f"got {mask.shape}"
            )
        if mask.dtype != np.bool_:
            if mask.dtype.kind not in "iuf":
                raise InvalidInput(f"the seed mask must be boolean, got dtype {mask.dtype}")
            if not np.isin(mask, (0, 1)).all():
                raise InvalidInput(
                    f"the seed mask holds values other than 0 and 1 (dtype {mask.dtype}, "
                    f"range {np.nanmin(mask):g}..{np.nanmax(mask):g}); pass a boolean mask, "
                    "e.g. `probabilities > 0.5` or `labels == 3`"
                )
        mask = mask.astype(bool)
        if not mask.any():
            raise InvalidInput("the seed mask is empty: paint at least one pixel")
        model_mask = self.letterbox.mask_to_model(mask)
        size = self.manifest.pvs_mask_input_size
        low = _area_resize(model_mask.astype(np.float32), size)
        logits = np.where(low >= 0.5, SEED_MASK_LOGIT, -SEED_MASK_LOGIT).astype(np.float32)
        return self._run(replace(self._state, mask_input=logits, kind="mask"))

    def undo(self) -> pd.DataFrame | None:
        """Back to the result before the last prompt (None when no prompt is left)."""
        if not self._history:
            raise InvalidInput("nothing to undo")
        self._state, self.result = self._history.pop()
        return self.result

    def resume(self, prompts: PromptState) -> None:
        """Continue from ``prompts`` (an earlier result's :attr:`prompts`): the next prompt adds
        to them and refines that result's best mask."""
        if not isinstance(prompts, PromptState):
            raise InvalidInput(f"resume takes a session's prompts, got {type(prompts).__name__}")
        self._state = prompts

    def reset(self) -> None:
        """Forget every prompt; the image features stay."""
        self._history.clear()
        self._state = PromptState()
        self.result = None

    # -- running ----------------------------------------------------------------------------
    def _prompt_tensors(self, state: PromptState) -> dict[str, np.ndarray]:
        p = self.manifest.pvs_points
        coords = np.zeros((1, p, 2), np.float32)
        labels = np.full((1, p), -1, np.float32)
        n = len(state.points)
        if n:
            coords[0, :n] = state.points
            labels[0, :n] = state.labels
        size = self.manifest.pvs_mask_input_size
        mask_input = np.zeros((1, 1, size, size), np.float32)
        if state.mask_input is not None:
            mask_input[0, 0] = state.mask_input
        return {
            contract.PVS_POINT_COORDS: coords,
            contract.PVS_POINT_LABELS: labels,
            contract.PVS_BOX: np.asarray([state.box or (0, 0, 0, 0)], np.float32),
            contract.PVS_HAS_BOX: np.asarray([state.box is not None], np.bool_),
            contract.PVS_MASK_INPUT: mask_input,
            contract.PVS_HAS_MASK: np.asarray([state.mask_input is not None], np.bool_),
        }

    def _run(self, state: PromptState) -> pd.DataFrame:
        # In-process the masks are made here from the logits, the others only when looked at;
        # a server sends them (made where the logits are).
        remote = self.client._features.remote
        wanted = (
            contract.INTERACTIVE_OUTPUTS if remote else (contract.PVS_IOU, contract.PVS_LOW_RES)
        )
        out = self._request(self._prompt_tensors(state), wanted)
        iou = np.asarray(out[contract.PVS_IOU], np.float32).reshape(-1)
        low_res = np.asarray(out[contract.PVS_LOW_RES], np.float32)[0]  # [3, m, m]
        if len(low_res) != len(iou):
            raise BadData(
                f"server answered {len(iou)} scores and {len(low_res)} low-res masks for one "
                "interactive prompt"
            )
        order = np.argsort(-iou, kind="stable")
        if remote:
            masks, boxes = self._sent_masks(out[contract.MASKS_RLE], len(iou), order)
        else:
            masks, boxes = self._masks_of(low_res, order)
        frame = self._frame(masks, boxes, iou[order])
        self._history.append((self._state, self.result))
        # The best candidate's logits are the mask input of the next prompt.
        self._state = replace(state, mask_input=low_res[order[0]])
        self.result = frame
        return frame

    def _sent_masks(self, payload, count: int, order: np.ndarray) -> tuple[list, np.ndarray]:
        """The candidates' masks a server sent, in `order`, and their model-space boxes."""
        candidates = self.manifest.graph_io(contract.PVS_DECODER).output(contract.PVS_DECODER_MASKS)
        masks = decode_answer(payload, self.client.image_size, candidates.shape[1])
        if len(masks) != count:
            raise BadData(
                f"server answered {count} scores but {len(masks)} masks for one interactive prompt"
            )
        framed = [FrameMask(masks.mask(i), self.letterbox) for i in order]
        return framed, np.asarray(masks.bboxes)[order]

    def _masks_of(self, low_res: np.ndarray, order: np.ndarray) -> tuple[list, np.ndarray]:
        """The candidates' masks made from their logits, in `order`: the best now (it is shown),
        the others when first used; their boxes now, without making the masks."""
        size = self.client.image_size
        ranked = [CandidateLogits(logits, size) for logits in low_res[order]]
        framed = [FrameMask(ranked[0].mask(), self.letterbox)]
        framed += [FrameMask(None, self.letterbox, make=c.mask) for c in ranked[1:]]
        return framed, threshold_boxes(low_res[order], size, INTERACTIVE_CUT)

    def _frame(self, masks: list, boxes: np.ndarray, iou: np.ndarray) -> pd.DataFrame:
        boxes = self.letterbox.boxes_to_image(np.asarray(boxes, np.float32))
        return pd.DataFrame(
            {
                "mask": masks,
                "iou": iou,
                "box": list(boxes.astype(np.float32)),
                "prompt_kind": "interactive",
            }
        )

    def everything(self, points_per_side: int = 16, **options) -> pd.DataFrame:
        """Automatic mask generation on the cached features: a point grid, filtered, deduplicated."""
        from napari_sam3.client.automatic import generate_masks

        def decode(point_coords: np.ndarray, point_labels: np.ndarray):
            out = self._request(
                {
                    contract.PVS_GRID_COORDS: point_coords.astype(np.float32),
                    contract.PVS_GRID_LABELS: point_labels.astype(np.float32),
                },
                [contract.PVS_GRID_LOW_RES, contract.PVS_GRID_IOU],
            )
            return out[contract.PVS_GRID_LOW_RES], out[contract.PVS_GRID_IOU]

        result = generate_masks(
            decode,
            self.client.image_size,
            points_per_side=points_per_side,
            valid_shape=self.letterbox.resized_shape,
            **options,
        )
        return self._everything_frame(result)

    def _everything_frame(self, result: dict) -> pd.DataFrame:
        size = self.client.image_size
        masks = result["masks"]
        rows, cols = masks.shape
        framed = []
        for i in range(len(masks)):
            full = np.zeros((1, size, size), bool)
            full[0, :rows, :cols] = masks[i]
            framed.append(FrameMask(RleMasks.from_dense(full).mask(0), self.letterbox))
        boxes = self.letterbox.boxes_to_image(
            np.asarray(result["boxes"], np.float32).reshape(-1, 4)
        )
        return pd.DataFrame(
            {
                "mask": framed,
                "iou": result["iou"],
                "stability": result["stability"],
                "box": list(boxes.astype(np.float32)),
                "point": list(self.letterbox.points_to_image(result["points"]).astype(np.float32)),
                "prompt_kind": "everything",
            }
        )


@dataclass(frozen=True)
class CandidateLogits:
    """One candidate's low-res logits [m, m]; `mask()` makes its full-size model-space mask."""

    logits: np.ndarray = field(repr=False)
    size: int

    def mask(self):
        return threshold_masks(self.logits[None], self.size, INTERACTIVE_CUT).mask(0)


def _area_resize(image: np.ndarray, size: int) -> np.ndarray:
    """Square float image -> (size, size) by area averaging (exact when sizes divide)."""
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BOX))

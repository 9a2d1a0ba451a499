"""bf16 against fp32, end to end through the client, for every kind of prompt (tiny model).

The bf16 side is OpenVINO's own bf16 where this CPU has it natively, and elsewhere the same
repository with every float tensor rounded to bf16 (see the `bf16_repository` fixture), so that
the bounds below are checked on every machine. Bounds (tiny model, Sentinel-2 crop):

- grounding prompts (text, exemplar, concept), all queries returned (score_thr 0, no dedup),
  detections matched one to one by box: score difference <= SCORE_BOUND for each, mask IoU >=
  MASK_IOU_BOUND for each mask of at least MIN_AREA pixels, and the top-K by score agree in at
  least TOPK_AGREE of K;
- interactive prompts: each of the 3 candidates' predicted IoU within IOU_PRED_BOUND, the
  ranking the same wherever fp32's neighbouring candidates are further apart than twice that,
  and each candidate's mask IoU >= MASK_IOU_BOUND.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from napari_sam3 import Sam3Client

SCORE_BOUND = 0.02
MASK_IOU_BOUND = 0.9
MIN_AREA = 50
TOPK = 5
TOPK_AGREE = 4
IOU_PRED_BOUND = 0.02
ALL = {"score_thr": 0.0, "max_det": 1000, "dedup": None}


@pytest.fixture(scope="module")
def clients(tiny_repository, bf16_repository):
    repository, options = bf16_repository
    fp32 = Sam3Client.local(tiny_repository)
    bf16 = Sam3Client.local(repository, **options)
    yield fp32, bf16
    fp32.close()
    bf16.close()


def _dense(frame) -> list[np.ndarray]:
    return [np.asarray(m.to_dense(), bool) for m in frame["mask"]]


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def compare_detections(ref, got) -> dict:
    """Match the two results' detections one to one by box, and measure the differences."""
    assert len(ref) == len(got) > TOPK, "every query must come back on both sides"
    ref_boxes, got_boxes = np.stack(ref["box"]), np.stack(got["box"])
    cost = np.abs(ref_boxes[:, None] - got_boxes[None]).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    ref_masks, got_masks = _dense(ref), _dense(got)
    score_diff = np.abs(ref["score"].to_numpy()[rows] - got["score"].to_numpy()[cols])
    ious = [
        mask_iou(ref_masks[r], got_masks[c])
        for r, c in zip(rows, cols, strict=True)
        if max(ref_masks[r].sum(), got_masks[c].sum()) >= MIN_AREA
    ]
    matched = dict(zip(rows.tolist(), cols.tolist(), strict=True))
    top_ref = set(range(TOPK))  # both frames are sorted best first
    top_got = {r for r, c in matched.items() if c < TOPK}
    return {
        "box_shift": float(cost[rows, cols].max()),
        "score_diff": float(score_diff.max()),
        "min_mask_iou": min(ious) if ious else 1.0,
        "masks_compared": len(ious),
        "topk_agree": len(top_ref & top_got),
    }


def check_grounding(ref, got) -> dict:
    stats = compare_detections(ref, got)
    assert stats["score_diff"] <= SCORE_BOUND, stats
    assert stats["masks_compared"] > 0, stats
    assert stats["min_mask_iou"] >= MASK_IOU_BOUND, stats
    assert stats["topk_agree"] >= TOPK_AGREE, stats
    return stats


def test_text_prompt(clients, s2_crop):
    fp32, bf16 = clients
    for prompt in ("field", "river"):
        check_grounding(fp32.segment(s2_crop, prompt, **ALL), bf16.segment(s2_crop, prompt, **ALL))


def test_exemplar_prompt(clients, s2_crop):
    fp32, bf16 = clients
    boxes = [[40, 30, 160, 140], [250, 120, 330, 220]]
    check_grounding(
        fp32.segment(s2_crop, exemplar_boxes=boxes, **ALL),
        bf16.segment(s2_crop, exemplar_boxes=boxes, **ALL),
    )


def test_concept_prompt(clients, s2_crop, s2_rgb_raster):
    """A concept encoded on one image (each side its own), applied to another."""
    fp32, bf16 = clients
    boxes = [[40, 30, 160, 140]]
    other = s2_rgb_raster.data[:, 400:700, 900:1300]
    concepts = [c.encode_exemplars(s2_crop, boxes, name="patch") for c in clients]
    check_grounding(
        fp32.segment(other, concept=concepts[0], **ALL),
        bf16.segment(other, concept=concepts[1], **ALL),
    )


def check_candidates(ref, got) -> None:
    # the frames are ordered by predicted IoU: compare candidate by candidate in fp32's order
    assert len(ref) == len(got) == 3
    ref_iou, got_iou = ref["iou"].to_numpy(), got["iou"].to_numpy()
    ref_masks, got_masks = _dense(ref), _dense(got)
    # got's candidate matched to each of ref's, by mask IoU (the ranking may differ where tied)
    ious = np.array([[mask_iou(a, b) for b in got_masks] for a in ref_masks])
    match = ious.argmax(axis=1)
    assert sorted(match.tolist()) == [0, 1, 2], ious
    assert np.abs(ref_iou - got_iou[match]).max() <= IOU_PRED_BOUND
    assert ious[np.arange(3), match].min() >= MASK_IOU_BOUND, ious
    for i in range(2):
        if ref_iou[i] - ref_iou[i + 1] > 2 * IOU_PRED_BOUND:
            assert match[i] < match[i + 1], (ref_iou, got_iou)


def test_interactive_prompts(clients, s2_crop):
    sessions = [c.interactive(s2_crop) for c in clients]
    steps = [
        lambda s: s.add_point((120, 90)),
        lambda s: s.add_point((200, 150), positive=False),
        lambda s: s.add_box([60, 40, 220, 200]),
    ]
    for step in steps:
        ref, got = (step(s) for s in sessions)
        check_candidates(ref, got)

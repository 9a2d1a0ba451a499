"""bf16 against fp32, end to end through the client, for every kind of prompt (tiny model).

The bf16 side is OpenVINO's own bf16 where this CPU has it natively, and elsewhere the same
repository with every float tensor rounded to bf16 (see the `bf16_repository` fixture), so that
the bounds below are checked on every machine. Bounds (tiny model, Sentinel-2 crop):

- grounding prompts (text, exemplar, concept), all queries returned (score_thr 0, no dedup),
  detections matched one to one by box: box shift (sum over the 4 coordinates) <= BOX_BOUND of
  the image's longer side, score difference <= SCORE_BOUND for each, mask IoU >= MASK_IOU_BOUND
  for each mask of at least MIN_AREA pixels, and the top-K by score agree in >= TOPK_AGREE of K;
- interactive prompts: each of the 3 candidates' predicted IoU within IOU_PRED_BOUND, the
  ranking the same wherever fp32's neighbouring candidates are further apart than twice that,
  and each candidate's mask IoU >= MASK_IOU_BOUND.

Measured with the emulation (2026-12-01): box shift <= 0.02, score difference <= 0.004, mask IoU
>= 0.90 (grounding) and >= 0.88 (candidates: random weights make noise-like masks, whose edges
are all near the threshold), top-5 agreement 4-5 of 5, predicted IoU difference <= 0.004.
"""

from __future__ import annotations

import pytest

from napari_sam3 import Sam3Client
from napari_sam3.client.parity import compare_candidates, compare_detections

BOX_BOUND = 0.05
SCORE_BOUND = 0.02
MASK_IOU_BOUND = 0.85
MIN_AREA = 50
TOPK = 5
TOPK_AGREE = 4
IOU_PRED_BOUND = 0.02
ALL = {"score_thr": 0.0, "max_det": 1000, "dedup": None}


@pytest.fixture(scope="module")
def clients(tiny_repository, bf16_repository):
    repository, options = bf16_repository
    fp32 = Sam3Client.local(tiny_repository, runtime="onnxruntime", precision="fp32")
    bf16 = Sam3Client.local(repository, **options)
    yield fp32, bf16
    fp32.close()
    bf16.close()


def check_grounding(ref, got, image) -> dict:
    stats = compare_detections(ref, got, top_k=TOPK, min_area=MIN_AREA)
    assert stats["detections"] > TOPK, "every query must come back on both sides"
    assert stats["box_shift"] <= BOX_BOUND * max(image.shape[-2:]), stats
    assert stats["score_diff"] <= SCORE_BOUND, stats
    assert stats["masks_compared"] > 0, stats
    assert stats["min_mask_iou"] >= MASK_IOU_BOUND, stats
    assert stats["topk_agree"] >= TOPK_AGREE, stats
    return stats


def test_text_prompt(clients, s2_crop):
    fp32, bf16 = clients
    for prompt in ("field", "river"):
        check_grounding(
            fp32.segment(s2_crop, prompt, **ALL), bf16.segment(s2_crop, prompt, **ALL), s2_crop
        )


def test_exemplar_prompt(clients, s2_crop):
    fp32, bf16 = clients
    boxes = [[40, 30, 160, 140], [250, 120, 330, 220]]
    check_grounding(
        fp32.segment(s2_crop, exemplar_boxes=boxes, **ALL),
        bf16.segment(s2_crop, exemplar_boxes=boxes, **ALL),
        s2_crop,
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
        other,
    )


def check_candidates(ref, got) -> dict:
    assert len(ref) == len(got) == 3
    stats = compare_candidates(ref, got)
    assert sorted(stats["match"]) == [0, 1, 2], stats
    assert stats["iou_pred_diff"] <= IOU_PRED_BOUND, stats
    assert stats["min_mask_iou"] >= MASK_IOU_BOUND, stats
    ref_iou, match = stats["ref_iou"], stats["match"]
    for i in range(2):  # the ranking holds wherever fp32's candidates are clearly apart
        if ref_iou[i] - ref_iou[i + 1] > 2 * IOU_PRED_BOUND:
            assert match[i] < match[i + 1], stats
    return stats


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

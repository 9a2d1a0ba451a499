"""The pipeline in each precision against ONNX Runtime fp32, end to end through the client.

The compared side is, in turn: the suite's own fp32 (OpenVINO), the bf16-emulated graphs (every
float tensor rounded to bf16, run on any CPU) and OpenVINO's own bf16 (only where this CPU
computes bf16 natively; skipped elsewhere, with the reason). Every side is held to the same
bounds, so every host gives the same verdicts, for text, exemplars, concepts, several keywords
and concepts at once, clicks and a scene run. Bounds (tiny model, Sentinel-2 crop):

- grounding prompts (text, exemplar, concept, multi, scene), all queries returned (score_thr 0,
  no dedup), detections matched one to one by box: box shift (sum over the 4 coordinates) <=
  BOX_BOUND of the image's longer side, score difference <= SCORE_BOUND for each, mask IoU >=
  MASK_IOU_BOUND for each mask of at least MIN_AREA pixels, and the top-K by score agree in >=
  TOPK_AGREE of K;
- interactive prompts: each of the 3 candidates' predicted IoU within IOU_PRED_BOUND, the
  ranking the same wherever fp32's neighbouring candidates are further apart than twice that,
  and each candidate's mask IoU >= MASK_IOU_BOUND;
- and the side computes what it is named: the fp32 side within fp32 noise of the reference
  (scores and predicted IoUs within FP32_NOISE, boxes within FP32_BOX_NOISE pixels), each bf16
  side further from it than that (a bf16 side that computed fp32 fails).

Measured (2026-12-03, Zen 4: the emulation and OpenVINO's own bf16): box shift <= 8.5 px of
420 (0.02), score difference <= 0.0042, predicted IoU difference <= 0.0042, top-5 agreement 4-5
of 5, mask IoU >= 0.848 (random weights make noise-like masks whose edges all lie near the
threshold: the native side's worst, a concept within `multi`; the emulation's >= 0.896). Each
bf16 prompt's largest score (or predicted IoU) difference >= 9e-4; the fp32 side's <= 3e-7, its
boxes within 5e-4 px. tests/runtime/test_bf16_emulation.py holds each graph likewise.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.client.parity import compare_candidates, compare_detections
from napari_sam3.core import contract
from napari_sam3.imagery.raster import read_raster
from napari_sam3.scene import segment_scene

from .conftest import BF16_EMULATED, BF16_NATIVE, FP32, model_in

BOX_BOUND = 0.05
SCORE_BOUND = 0.02
MASK_IOU_BOUND = 0.8
MIN_AREA = 50
TOPK = 5
TOPK_AGREE = 4
IOU_PRED_BOUND = 0.02
FP32_NOISE = 1e-4
FP32_BOX_NOISE = 0.05
ALL = {"score_thr": 0.0, "max_det": 1000, "dedup": None}
BOXES = [[40, 30, 160, 140], [250, 120, 330, 220]]


@pytest.fixture(scope="module")
def reference(tiny_repository):
    client = Sam3Client.local(tiny_repository, runtime="onnxruntime", precision="fp32")
    yield client
    client.close()


@pytest.fixture(scope="module", params=[FP32, BF16_EMULATED, BF16_NATIVE])
def compared(request):
    repository, options = model_in(request, request.param)
    client = Sam3Client.local(repository, **options)
    yield request.param, client
    client.close()


@pytest.fixture
def clients(reference, compared):
    return reference, compared[1]


@pytest.fixture
def side(compared) -> str:
    return compared[0]


def check_computed_as_named(side: str, difference: float, box_shift: float = 0.0) -> None:
    if side == FP32:
        assert difference <= FP32_NOISE and box_shift <= FP32_BOX_NOISE, (difference, box_shift)
    else:
        assert difference > FP32_NOISE, f"{side} gave fp32's answer ({difference})"


def check_grounding(ref, got, image, side: str) -> dict:
    stats = compare_detections(ref, got, top_k=TOPK, min_area=MIN_AREA)
    check_computed_as_named(side, stats["score_diff"], stats["box_shift"])
    assert stats["detections"] > TOPK, "every query must come back on both sides"
    assert stats["box_shift"] <= BOX_BOUND * max(image.shape[-2:]), stats
    assert stats["score_diff"] <= SCORE_BOUND, stats
    assert stats["masks_compared"] > 0, stats
    assert stats["min_mask_iou"] >= MASK_IOU_BOUND, stats
    assert stats["topk_agree"] >= TOPK_AGREE, stats
    return stats


def test_text_prompt(clients, side, s2_crop):
    for prompt in ("field", "river"):
        ref, got = (c.segment(s2_crop, prompt, **ALL) for c in clients)
        check_grounding(ref, got, s2_crop, side)


def test_exemplar_prompt(clients, side, s2_crop):
    ref, got = (c.segment(s2_crop, exemplar_boxes=BOXES, **ALL) for c in clients)
    check_grounding(ref, got, s2_crop, side)


def test_concept_prompt(clients, side, s2_crop, s2_rgb_raster):
    """A concept encoded on one image (each side its own), applied to another."""
    image = s2_rgb_raster.data[:, 400:700, 900:1300]
    ref, got = (
        c.segment(image, concept=c.encode_exemplars(s2_crop, BOXES[:1], name="patch"), **ALL)
        for c in clients
    )
    check_grounding(ref, got, image, side)


def test_keywords_and_a_concept_on_one_vision_pass(clients, side, s2_crop):
    keywords = ["field", "river"]
    frames = [
        c.multi(s2_crop, keywords, concepts={"patch": c.encode_exemplars(s2_crop, BOXES)}, **ALL)
        for c in clients
    ]
    for frame in frames:
        assert set(frame["keyword"]) == {*keywords, "patch"}
    for keyword in (*keywords, "patch"):
        ref, got = (f[f["keyword"] == keyword].reset_index(drop=True) for f in frames)
        check_grounding(ref, got, s2_crop, side)


def check_candidates(ref, got, side: str) -> dict:
    assert len(ref) == len(got) == 3
    stats = compare_candidates(ref, got)
    check_computed_as_named(side, stats["iou_pred_diff"])
    assert sorted(stats["match"]) == [0, 1, 2], stats
    assert stats["iou_pred_diff"] <= IOU_PRED_BOUND, stats
    assert stats["min_mask_iou"] >= MASK_IOU_BOUND, stats
    ref_iou, match = stats["ref_iou"], stats["match"]
    for i in range(2):  # the ranking holds wherever fp32's candidates are clearly apart
        if ref_iou[i] - ref_iou[i + 1] > 2 * IOU_PRED_BOUND:
            assert match[i] < match[i + 1], stats
    return stats


def test_interactive_prompts(clients, side, s2_crop):
    sessions = [c.interactive(s2_crop) for c in clients]
    steps = [
        lambda s: s.add_point((120, 90)),
        lambda s: s.add_point((200, 150), positive=False),
        lambda s: s.add_box([60, 40, 220, 200]),
    ]
    for step in steps:
        ref, got = (step(s) for s in sessions)
        check_candidates(ref, got, side)


def test_a_scene_run(clients, side, crop_tif):
    """Read, stretched, tiled and mapped back by `segment_scene`: within the bounds of fp32's
    scene, and on each side exactly that side's own answer for the same raster."""
    scenes = [
        segment_scene(c, crop_tif, "building", tile_size=512, progress=False, **ALL)
        for c in clients
    ]
    assert [len(s.attrs["tiles"]) for s in scenes] == [1, 1]
    raster = read_raster(crop_tif)
    check_grounding(*scenes, raster.data, side)
    own = clients[1].segment(raster, "building", **ALL)
    np.testing.assert_array_equal(scenes[1]["score"].to_numpy(), own["score"].to_numpy())
    np.testing.assert_allclose(np.stack(scenes[1]["box"]), np.stack(own["box"]), atol=1e-3)
    for mine, theirs in zip(scenes[1]["mask"], own["mask"], strict=True):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))


def test_each_side_computes_as_it_is_named(compared, s2_crop):
    """What ran is what the side says: OpenVINO fp32, the emulated graphs (bf16 casts in every
    graph) in ONNX Runtime, or OpenVINO bf16 for every graph."""
    side, client = compared
    client.segment(s2_crop, "field")
    client.interactive(s2_crop).add_point((120, 90))
    summary = client.engine.runtime_summary()
    if side == FP32:
        assert summary.startswith("openvino fp32: ") and "bf16" not in summary, summary
    elif side == BF16_NATIVE:
        assert summary.startswith("openvino bf16: ") and "fp32" not in summary, summary
    else:
        assert summary.startswith("onnxruntime fp32: ") and "openvino" not in summary, summary
        for graph in client.engine.loaded_graphs():
            model = onnx.load(str(contract.graph_path(client.engine.repository, graph)))
            to_bf16 = [
                n
                for n in model.graph.node
                if n.op_type == "Cast"
                and onnx.helper.get_node_attr_value(n, "to") == onnx.TensorProto.BFLOAT16
            ]
            assert len(to_bf16) > len(model.graph.node) / 4, graph

"""ONNX Runtime vs the official eager torch code, on the same random weights (tiny size)."""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3.core import contract
from sam3_export.graphs.pvs_decoder import image_features

# Tolerances of the issue: logits, boxes, presence 1e-4; mask logits 1e-3.
TOL = {
    contract.PRED_LOGITS: 1e-4,
    contract.PRED_BOXES: 1e-4,
    contract.PRESENCE_LOGIT: 1e-4,
    contract.PRED_MASKS: 1e-3,
}
BOX_A = [20.0, 30.0, 70.0, 90.0]
BOX_B = [60.0, 10.0, 100.0, 45.0]


def k_boxes(k: int, seed: int = 3) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 70, (k, 2))
    wh = rng.uniform(8, 40, (k, 2))
    return np.concatenate([xy, xy + wh], axis=1).round(2).tolist()


CASES = {
    "text only": ("a red car", [], []),
    "one positive box": ("a red car", [BOX_A], [1]),
    "one negative box": ("a red car", [BOX_A], [0]),
    "positive and negative": ("building", [BOX_A, BOX_B], [1, 0]),
    "all K slots": ("building", k_boxes(contract.EXEMPLAR_SLOTS), [1, 0, 1, 1, 0, 1, 0, 1]),
    "exemplars without text": (contract.VISUAL_PROMPT, [BOX_A, BOX_B], [1, 1]),
    "exemplars without text, one negative": (contract.VISUAL_PROMPT, [BOX_A, BOX_B], [1, 0]),
}


def eager_outputs(out) -> dict[str, np.ndarray]:
    """The official output dict, in the graph's output layout."""
    return {
        contract.PRED_LOGITS: out["pred_logits"][..., 0].numpy(),
        contract.PRED_BOXES: out["pred_boxes_xyxy"].numpy(),
        contract.PRED_MASKS: out["pred_masks"].numpy(),
        contract.PRESENCE_LOGIT: out["presence_logit_dec"].numpy(),
    }


def assert_close(got: dict, want: dict, tol: dict = TOL) -> None:
    for name, limit in tol.items():
        assert got[name].shape == want[name].shape, name
        diff = float(np.abs(got[name] - want[name]).max())
        assert diff <= limit, f"{name}: max|diff| {diff:.3g} > {limit}"


def ort_decode(ort_repo, vision, text, boxes, labels) -> dict[str, np.ndarray]:
    return ort_repo.run(contract.DECODER, {**vision, **text, **ort_repo.slot_arrays(boxes, labels)})


def test_encoder(ort_repo, eager, images):
    got = ort_repo.encode(images.a)
    ref = eager.backbone(images.a, "x")
    tracker = eager.model.inst_interactive_predictor.model
    decoder = tracker.sam_mask_decoder
    pvs = ref["sam2_backbone_out"]["backbone_fpn"]
    levels = [decoder.conv_s0(pvs[0]).detach(), decoder.conv_s1(pvs[1]).detach(), pvs[2]]
    want = {
        **{n: x.numpy() for n, x in zip(contract.DET_FPN, ref["backbone_fpn"], strict=True)},
        contract.DET_POS: ref["vision_pos_enc"][-1].numpy(),
        **image_features(tracker, levels),
    }
    # the interactive levels are the official ones, channels-last
    for name, level in zip(contract.PVS_FPN, levels, strict=True):
        assert np.array_equal(want[name], level.permute(0, 2, 3, 1).numpy())
    assert set(got) == set(want) == set(contract.VISION_TENSORS)
    for name, value in want.items():
        diff = float(np.abs(got[name] - value).max())
        assert diff <= 1e-4, f"{name}: {diff:.3g}"


@pytest.mark.parametrize("text", ["a red car", contract.VISUAL_PROMPT, "solar panels on roofs"])
def test_text(ort_repo, eager, text):
    tokens = eager.tokens(text)
    got = ort_repo.text(tokens)
    ref = eager.model.backbone.forward_text([text], device="cpu")
    want = ref["language_features"].transpose(0, 1).detach().numpy()
    assert float(np.abs(got[contract.TEXT_FEATURES] - want).max()) <= 1e-4
    np.testing.assert_array_equal(got[contract.TEXT_PADDING_MASK], ref["language_mask"].numpy())


@pytest.mark.parametrize("case", list(CASES))
def test_decoder(ort_repo, eager, images, case):
    text, boxes, labels = CASES[case]
    vision = ort_repo.encode(images.a)
    got = ort_decode(ort_repo, vision, ort_repo.text(eager.tokens(text)), boxes, labels)
    want = eager_outputs(eager.ground(eager.backbone(images.a, text), boxes, labels))
    assert_close(got, want)


def test_valid_slots_anywhere(ort_repo, eager, images):
    """Valid slots need not come first: the graph moves them to the front (stable)."""
    vision = ort_repo.encode(images.a)
    text = ort_repo.text(eager.tokens("building"))
    slots = ort_repo.slot_arrays([], [])
    for slot, box, label in ((2, BOX_A, 1), (5, BOX_B, 0)):
        slots[contract.EXEMPLAR_BOXES][0, slot] = box
        slots[contract.EXEMPLAR_LABELS][0, slot] = label
        slots[contract.EXEMPLAR_VALID][0, slot] = True
    got = ort_repo.run(contract.DECODER, {**vision, **text, **slots})
    want = eager_outputs(eager.ground(eager.backbone(images.a, "building"), [BOX_A, BOX_B], [1, 0]))
    assert_close(got, want)


def test_invalid_slots_are_ignored(ort_repo, eager, images):
    """Whatever an unused slot holds (even NaN) changes nothing."""
    vision = ort_repo.encode(images.a)
    text = ort_repo.text(eager.tokens("building"))
    clean = ort_repo.slot_arrays([BOX_A], [1])
    dirty = {k: v.copy() for k, v in clean.items()}
    dirty[contract.EXEMPLAR_BOXES][0, 1:] = np.nan
    dirty[contract.EXEMPLAR_BOXES][0, 3] = [1e9, -5, 3, 2]
    dirty[contract.EXEMPLAR_LABELS][0, 1:] = 7
    a = ort_repo.run(contract.DECODER, {**vision, **text, **clean})
    b = ort_repo.run(contract.DECODER, {**vision, **text, **dirty})
    for name in contract.DECODER_OUTPUTS:
        assert np.isfinite(b[name]).all()
        np.testing.assert_array_equal(a[name], b[name])

"""The server checks every input a raw Triton client sends, with the client's own message (issue 24).

Requests go to the real tritonserver through a plain `tritonclient.grpc` client, as any other
language or perf_analyzer would send them. On the code before: NaN, 1e30 and inverted boxes,
exemplar label 7, NaN / all-padding concepts, NaN clicks and token ids outside the vocabulary
were answered from garbage; a ground request without token_ids answered with Python's
"int() argument must be ... not 'NoneType'"; a grid of 200000 prompts ran for minutes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from napari_sam3.core import contract, validate
from napari_sam3.core.errors import InvalidInput
from napari_sam3.prompts.tokenizer import tokenize

from .._required import require

grpcclient = require("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

DTYPES = {
    np.dtype(np.float32): "FP32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.int32): "INT32",
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.object_): "BYTES",
}


@pytest.fixture(scope="module")
def raw(triton_server):
    client = grpcclient.InferenceServerClient(triton_server.grpc_address)
    config = client.get_model_config(contract.CACHED, as_json=True)["config"]
    manifest = contract.manifest_from_config(
        {k: v["string_value"] for k, v in config["parameters"].items()}
    )
    yield client, manifest
    client.close()


def _infer(client, model: str, inputs: dict) -> dict:
    feed = []
    for name, value in inputs.items():
        value = np.asarray(value)
        tensor = grpcclient.InferInput(name, list(value.shape), DTYPES[value.dtype])
        tensor.set_data_from_numpy(value)
        feed.append(tensor)
    result = client.infer(model, feed, client_timeout=120)
    return result.get_response(as_json=True)


def _text(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=np.object_)


def _image(manifest, seed: int = 0) -> np.ndarray:
    s = manifest.image_size
    return np.random.default_rng(seed).integers(0, 255, (1, 3, s, s), dtype=np.uint8)


def _ground(manifest, **extra) -> dict:
    k = manifest.exemplar_slots
    boxes = np.zeros((1, k, 4), np.float32)
    boxes[0, 0] = (10, 10, 40, 40)
    labels = np.zeros((1, k), np.int64)
    labels[0, 0] = 1
    valid = np.zeros((1, k), np.bool_)
    valid[0, 0] = True
    inputs = {
        contract.CACHE_OP: _text("ground"),
        contract.IMAGES: _image(manifest),
        contract.TOKEN_IDS: tokenize("building"),
        contract.EXEMPLAR_BOXES: boxes,
        contract.EXEMPLAR_LABELS: labels,
        contract.EXEMPLAR_VALID: valid,
    }
    inputs.update(extra)
    return inputs


def _concept(manifest, tokens=None, padding=None) -> dict:
    t, d = manifest.sizes.concept_tokens, manifest.sizes.d_model
    base = {
        contract.CACHE_OP: _text("ground"),
        contract.IMAGES: _image(manifest),
        contract.TOKEN_IDS: tokenize(contract.VISUAL_PROMPT),
        contract.CONCEPT_TOKENS_NAME: np.zeros((1, t, d), np.float32) if tokens is None else tokens,
        contract.CONCEPT_PADDING_MASK: np.zeros((1, t), np.bool_) if padding is None else padding,
    }
    return base


def _click(manifest, coords=(20.0, 20.0), label=1.0) -> dict:
    p, m = manifest.pvs_points, manifest.pvs_mask_input_size
    point_coords = np.zeros((1, p, 2), np.float32)
    point_labels = np.full((1, p), -1, np.float32)
    point_coords[0, 0] = coords
    point_labels[0, 0] = label
    return {
        contract.CACHE_OP: _text("interactive"),
        contract.IMAGES: _image(manifest),
        contract.PVS_POINT_COORDS: point_coords,
        contract.PVS_POINT_LABELS: point_labels,
        contract.PVS_BOX: np.zeros((1, 4), np.float32),
        contract.PVS_HAS_BOX: np.array([False]),
        contract.PVS_MASK_INPUT: np.zeros((1, 1, m, m), np.float32),
        contract.PVS_HAS_MASK: np.array([False]),
    }


def _client_message(inputs: dict, manifest) -> str:
    """What napari_sam3's client says of the same tensors (it runs the same rules first)."""
    with pytest.raises(InvalidInput) as refused:
        validate.model_inputs(inputs, manifest)
    return str(refused.value)


def _bad(manifest, case: str) -> dict:
    s = manifest.image_size
    tokens_neg = tokenize("building")
    tokens_neg[0, 1] = -1
    tokens_big = tokenize("building")
    tokens_big[0, 1] = 50000
    no_end = np.full((1, contract.TEXT_TOKENS), 320, np.int64)
    t, d = manifest.sizes.concept_tokens, manifest.sizes.d_model

    def boxes(row):
        inputs = _ground(manifest)
        inputs[contract.EXEMPLAR_BOXES][0, 0] = row
        return inputs

    cases = {
        "nan box": lambda: boxes((np.nan, 1, 5, 5)),
        "1e30 box": lambda: boxes((0, 0, 1e30, 1e30)),
        "inverted box": lambda: boxes((40, 40, 10, 10)),
        "box outside": lambda: boxes((0, 0, s + 50, 20)),
        "label 7": lambda: {
            **_ground(manifest),
            contract.EXEMPLAR_LABELS: np.full((1, manifest.exemplar_slots), 7, np.int64),
        },
        "nan concept": lambda: _concept(manifest, tokens=np.full((1, t, d), np.nan, np.float32)),
        "inf concept": lambda: _concept(manifest, tokens=np.full((1, t, d), np.inf, np.float32)),
        "all padding": lambda: _concept(manifest, padding=np.ones((1, t), np.bool_)),
        "nan click": lambda: _click(manifest, coords=(np.nan, 3.0)),
        "click outside": lambda: _click(manifest, coords=(5.0, s * 10.0)),
        "click label 5": lambda: _click(manifest, label=5.0),
        "token -1": lambda: _ground(manifest, **{contract.TOKEN_IDS: tokens_neg}),
        "token 50000": lambda: _ground(manifest, **{contract.TOKEN_IDS: tokens_big}),
        "no end token": lambda: _ground(manifest, **{contract.TOKEN_IDS: no_end}),
        "nan score_thr": lambda: _ground(
            manifest, **{contract.SCORE_THR: np.array([np.nan], np.float32)}
        ),
        "max_det 0": lambda: _ground(manifest, **{contract.MAX_DET: np.array([0], np.int32)}),
    }
    return cases[case]()


CASES = [
    ("nan box", "exemplar boxes contain NaN or infinity"),
    ("1e30 box", "reaches outside the"),
    ("inverted box", "is not [x1, y1, x2, y2] with x1 <= x2"),
    ("box outside", "reaches outside the"),
    ("label 7", "exemplar_labels must be one 1 (positive) or 0 (negative)"),
    ("nan concept", "is not a usable concept (every value is NaN)"),
    ("inf concept", "is not a usable concept (it holds NaN or infinity)"),
    ("all padding", "every concept token is marked as padding"),
    ("nan click", "point_coords holds NaN or infinity"),
    ("click outside", "lies outside the"),
    ("click label 5", "must be 1 (positive), 0 (negative) or -1 (no point)"),
    ("token -1", "outside the vocabulary 0..49407"),
    ("token 50000", "outside the vocabulary 0..49407"),
    ("no end token", "has no end token 49407"),
    ("nan score_thr", "score_thr must be a number within [0, 1]"),
    ("max_det 0", "max_det must be an integer from 1 to"),
]


@pytest.mark.parametrize(("case", "says"), CASES, ids=[c for c, _ in CASES])
def test_raw_requests_to_the_cache_model_are_refused_with_the_clients_message(raw, case, says):
    client, manifest = raw
    inputs = _bad(manifest, case)
    expected = _client_message(inputs, manifest)
    assert says in expected
    with pytest.raises(InferenceServerException) as refused:
        _infer(client, contract.CACHED, inputs)
    assert expected in refused.value.message()


def test_the_same_request_without_the_fault_is_answered(raw):
    """The cases above differ from an accepted request only by their fault."""
    client, manifest = raw
    for inputs in (_ground(manifest), _concept(manifest), _click(manifest)):
        validate.model_inputs(inputs, manifest)
        out = _infer(client, contract.CACHED, inputs)
        assert {o["name"] for o in out["outputs"]} >= {contract.CACHE_STATUS}


def test_a_ground_request_without_token_ids_is_refused_in_words(raw):
    client, manifest = raw
    inputs = _ground(manifest)
    del inputs[contract.TOKEN_IDS]
    with pytest.raises(InferenceServerException) as refused:
        _infer(client, contract.CACHED, inputs)
    message = refused.value.message()
    assert "a ground request needs token_ids" in message
    assert "NoneType" not in message


def _executions(client, model: str) -> int:
    stats = client.get_inference_statistics(model, as_json=True)
    return sum(int(s["inference_stats"]["success"].get("count", 0)) for s in stats["model_stats"])


def test_an_oversize_grid_is_refused_before_any_decoder_runs(raw):
    client, manifest = raw
    n = 200_000
    inputs = {
        contract.CACHE_OP: _text("interactive"),
        contract.IMAGES: _image(manifest, seed=1),
        contract.PVS_GRID_COORDS: np.full((n, manifest.pvs_grid_points, 2), 5.0, np.float32),
        contract.PVS_GRID_LABELS: np.ones((n, manifest.pvs_grid_points), np.float32),
    }
    before = _executions(client, contract.PVS_GRID_DECODER)
    encoder_before = _executions(client, contract.ENCODER)
    with pytest.raises(InferenceServerException) as refused:
        _infer(client, contract.CACHED, inputs)
    assert f"holds {n} prompts; at most {validate.MAX_GRID_PROMPTS}" in refused.value.message()
    assert _executions(client, contract.PVS_GRID_DECODER) == before
    assert _executions(client, contract.ENCODER) == encoder_before, "refused before encoding"
    # and the server answers the next client at once, with a grid inside the bound
    ok = dict(inputs)
    ok[contract.PVS_GRID_COORDS] = inputs[contract.PVS_GRID_COORDS][:4]
    ok[contract.PVS_GRID_LABELS] = inputs[contract.PVS_GRID_LABELS][:4]
    out = _infer(client, contract.CACHED, ok)
    assert contract.PVS_GRID_IOU in {o["name"] for o in out["outputs"]}


@pytest.mark.parametrize("bad", [-5, 49408, 10**9])
def test_the_text_graph_called_directly_refuses_ids_outside_the_vocabulary(raw, bad):
    client, manifest = raw
    tokens = tokenize("road")
    tokens[0, 2] = bad
    with pytest.raises(InferenceServerException) as refused:
        _infer(client, contract.TEXT, {contract.TOKEN_IDS: tokens})
    assert _client_message({contract.TOKEN_IDS: tokens}, manifest) in refused.value.message()


def test_the_multi_model_refuses_a_nan_concept(raw):
    client, manifest = raw
    inputs = _bad(manifest, "nan concept")
    del inputs[contract.CACHE_OP]
    with pytest.raises(InferenceServerException) as refused:
        _infer(client, contract.MULTI, inputs)
    assert "is not a usable concept (every value is NaN)" in refused.value.message()


def test_the_cache_info_still_answers_after_the_refusals(raw):
    client, manifest = raw
    # a sound request after the refusals (this test may run apart from the others: xdist) is
    # served and its image's features kept
    with pytest.raises(InferenceServerException):
        _infer(client, contract.CACHED, _bad(manifest, "token -1"))
    _infer(client, contract.CACHED, _ground(manifest))
    out = client.infer(
        contract.CACHED,
        [_string_input(contract.CACHE_OP, "info")],
        outputs=[grpcclient.InferRequestedOutput(contract.CACHE_INFO)],
    )
    info = json.loads(out.as_numpy(contract.CACHE_INFO)[0])
    assert info["features"]["entries"] >= 1


def _string_input(name: str, value: str):
    tensor = grpcclient.InferInput(name, [1], "BYTES")
    tensor.set_data_from_numpy(_text(value))
    return tensor


def test_a_box_drawn_past_the_image_edge_counts_for_its_part_over_the_image(local_client, s2_crop):
    """An analyst's box dragged past the edge is clipped (as the interactive box is); the wire
    then carries only boxes inside the model input, so the server's stricter rule holds."""
    rows, cols = s2_crop.data.shape[-2:]
    past = local_client.segment(s2_crop, exemplar_boxes=[[cols - 60, -40, cols + 90, 50]],
                                score_thr=0.0)  # fmt: skip
    clipped = local_client.segment(s2_crop, exemplar_boxes=[[cols - 60, 0, cols, 50]],
                                   score_thr=0.0)  # fmt: skip
    assert len(past) > 0
    np.testing.assert_array_equal(np.stack(past["box"]), np.stack(clipped["box"]))
    np.testing.assert_array_equal(past["score"], clipped["score"])
    with pytest.raises(InvalidInput, match=r"exemplar box 1 .* lies wholly outside the image"):
        local_client.segment(s2_crop, exemplar_boxes=[[5, 5, 40, 40], [cols + 1, 0, cols + 9, 9]])

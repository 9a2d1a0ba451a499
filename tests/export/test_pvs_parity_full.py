"""Full-size parity of the PVS graphs: ONNX Runtime vs the official interactive predictor.

Random weights at the published dimensions (image 1008, d_model 256, levels 288/144/72), fed
random neck features so that the ViT need not run. Every output within 1e-4 of
`Sam3Image.predict_inst`, same candidate ranking.

Deselected from the suite (marker `full_size`: the build and export take minutes on 2 cores); run
on purpose with `bash bench/verify_full_size.sh`. tests/export/test_pvs_decoder.py checks the same
code path at tiny size on every run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_sam3.core import contract

from .test_pvs_decoder import (
    TOL,
    Official,
    assert_matches,
    image_features,
    official_kwargs,
    prompt_arrays,
    random_levels,
)

pytestmark = pytest.mark.full_size


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    import onnxruntime as ort

    from sam3_export.graphs.pvs_decoder import export_pvs_decoder
    from sam3_export.model import randomize_
    from sam3_export.pvs_model import PvsDims, build_pvs_predictor

    predictor = build_pvs_predictor(PvsDims.full())
    randomize_(predictor, 3)
    out = tmp_path_factory.mktemp("pvs_full")
    export_pvs_decoder(predictor, out, size=1008)
    levels = random_levels(predictor, seed=9)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    sessions = {
        name: ort.InferenceSession(
            str(contract.graph_path(out, name)), options, providers=["CPUExecutionProvider"]
        )
        for name in contract.PVS_GRAPHS
    }
    features = image_features(predictor, levels)
    return predictor, Official(predictor, levels), sessions, features


def run(session, feeds) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


S, M = 1008, 288
RNG = np.random.default_rng(4)
CASES = {
    "one click": dict(points=[[300.0, 610.0]], labels=[1]),
    "three clicks": dict(
        points=[[300.0, 610.0], [700.0, 200.0], [505.5, 520.25]], labels=[1, 0, 1]
    ),
    "box": dict(box=[100.0, 200.0, 600.0, 900.0]),
    "box and click": dict(box=[100.0, 200.0, 600.0, 900.0], points=[[300.0, 610.0]], labels=[0]),
    "mask only": dict(mask=RNG.normal(0, 6, (M, M)).clip(-30, 30)),
}


def test_full_size_parity(full):
    predictor, official, sessions, features = full
    session = sessions[contract.PVS_DECODER]
    for name, prompt in CASES.items():
        got = run(session, {**features, **prompt_arrays(S, M, **prompt)})
        kw = official_kwargs(**prompt)
        try:
            assert_matches(got, official(multimask_output=True, **kw))
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None

    # refinement: the best low-res logits go back in with a correcting click
    first = CASES["one click"]
    got = run(session, {**features, **prompt_arrays(S, M, **first)})
    _, iou, low = official(**official_kwargs(**first))
    best_got = got[contract.PVS_DECODER_MASKS][0, int(np.argmax(got[contract.PVS_DECODER_IOU][0]))]
    second = dict(points=[*first["points"], [420.0, 330.0]], labels=[1, 0])
    got = run(session, {**features, **prompt_arrays(S, M, **second, mask=best_got)})
    kw = official_kwargs(**second, mask=low[int(np.argmax(iou))])
    assert_matches(got, official(multimask_output=True, **kw))


def test_full_size_grid_parity(full):
    predictor, official, sessions, features = full
    session = sessions[contract.PVS_GRID_DECODER]
    b = session.get_inputs()[len(features)].shape[0]  # the first prompt input
    pts = np.random.default_rng(8).uniform(0, S, (b, 1, 2)).astype(np.float32)
    labels = np.ones((b, 1), np.float32)
    got = run(
        session,
        {**features, contract.PVS_POINT_COORDS: pts, contract.PVS_POINT_LABELS: labels},
    )
    with torch.no_grad():
        _, iou, low = official(point_coords=pts, point_labels=labels.astype(np.int64))
    assert float(np.abs(np.clip(got[contract.PVS_DECODER_MASKS], -32, 32) - low).max()) <= TOL
    assert float(np.abs(got[contract.PVS_DECODER_IOU] - iou).max()) <= TOL
    np.testing.assert_array_equal(
        np.argsort(-got[contract.PVS_DECODER_IOU], axis=1, kind="stable"),
        np.argsort(-iou, axis=1, kind="stable"),
    )

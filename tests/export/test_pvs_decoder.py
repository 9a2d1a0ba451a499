"""The interactive (PVS) graphs of the tiny repository against the official interactive predictor.

The reference is `Sam3Image.predict_inst` (the `sam3` package's own code) on a separate build
of the same random weights, fed the same neck features. Features are random (the ViT need not
run), except in the end-to-end test, which goes through the exported encoder.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from napari_sam3.client.automatic import upscale_logits
from napari_sam3.core import contract
from sam3_export.graphs.pvs_decoder import image_features

TOL = 1e-4
UPSCALE_RTOL = 3e-5


class Official:
    """`Sam3Image.predict_inst` on given interactive-neck levels (as `Sam3Processor.set_image`
    leaves them: levels 0 and 1 projected by the mask decoder's conv_s0 / conv_s1)."""

    def __init__(self, predictor, levels: list[torch.Tensor]) -> None:
        from sam3.model.sam3_image import Sam3Image

        self.predictor = predictor
        # The predictor's default post-processing fills holes before upscaling; the graphs
        # stop at the low-res logits, so compare the upscaling without it.
        predictor._transforms.max_hole_area = 0
        self.levels = levels
        self.size = predictor.model.image_size
        self._predict_inst = Sam3Image.predict_inst
        self._holder = types.SimpleNamespace(inst_interactive_predictor=predictor)

    def __call__(self, **prompt):
        state = {
            "original_height": self.size,
            "original_width": self.size,
            "backbone_out": {
                "sam2_backbone_out": {
                    "backbone_fpn": list(self.levels),
                    "vision_pos_enc": [torch.zeros_like(x[:, :1]) for x in self.levels],
                }
            },
        }
        with torch.no_grad():
            return self._predict_inst(self._holder, state, return_logits=True, **prompt)


def project(predictor, raw: list[torch.Tensor]) -> list[torch.Tensor]:
    decoder = predictor.model.sam_mask_decoder
    with torch.no_grad():
        return [decoder.conv_s0(raw[0]), decoder.conv_s1(raw[1]), raw[2]]


def random_levels(predictor, seed: int) -> list[torch.Tensor]:
    model = predictor.model
    e = model.image_size // model.backbone_stride
    gen = torch.Generator().manual_seed(seed)
    raw = [torch.randn(1, model.hidden_dim, s, s, generator=gen) for s in (4 * e, 2 * e, e)]
    return project(predictor, raw)


def prompt_arrays(s: int, m: int, points=(), labels=(), box=None, mask=None, slots=16) -> dict:
    coords = np.zeros((1, slots, 2), np.float32)
    lab = np.full((1, slots), -1, np.float32)
    if len(points):
        coords[0, : len(points)] = points
        lab[0, : len(points)] = labels
    return {
        contract.PVS_POINT_COORDS: coords,
        contract.PVS_POINT_LABELS: lab,
        contract.PVS_BOX: np.asarray([box if box is not None else (0, 0, 0, 0)], np.float32),
        contract.PVS_HAS_BOX: np.asarray([box is not None]),
        contract.PVS_MASK_INPUT: (
            np.zeros((1, 1, m, m), np.float32)
            if mask is None
            else np.asarray(mask, np.float32).reshape(1, 1, m, m)
        ),
        contract.PVS_HAS_MASK: np.asarray([mask is not None]),
    }


def official_kwargs(points=(), labels=(), box=None, mask=None) -> dict:
    kw = {}
    if len(points):
        kw["point_coords"] = np.asarray(points, np.float32)
        kw["point_labels"] = np.asarray(labels, np.int64)
    if box is not None:
        kw["box"] = np.asarray(box, np.float32)
    if mask is not None:
        kw["mask_input"] = np.asarray(mask, np.float32)[None]
    return kw


@pytest.fixture(scope="module")
def head(eager):
    return eager.model.inst_interactive_predictor


@pytest.fixture(scope="module")
def levels(head):
    return random_levels(head, seed=5)


@pytest.fixture(scope="module")
def official(head, levels):
    return Official(head, levels)


@pytest.fixture(scope="module")
def features(head, levels) -> dict[str, np.ndarray]:
    return image_features(head, levels)


@pytest.fixture(scope="module")
def dims(ort_repo):
    s = ort_repo.image_size
    return types.SimpleNamespace(s=s, m=ort_repo.manifest.pvs_mask_input_size)


def click(ort_repo, features, dims, **prompt) -> dict[str, np.ndarray]:
    feeds = {**features, **prompt_arrays(dims.s, dims.m, **prompt)}
    return ort_repo.run(contract.PVS_DECODER, feeds)


def cases(s: int, m: int) -> dict[str, dict]:
    rng = np.random.default_rng(11)
    return {
        "one click": dict(points=[[0.3 * s, 0.6 * s]], labels=[1]),
        "negative click": dict(points=[[0.3 * s, 0.6 * s]], labels=[0]),
        "three clicks": dict(
            points=[[0.3 * s, 0.6 * s], [0.7 * s, 0.2 * s], [0.5 * s, 0.52 * s]], labels=[1, 0, 1]
        ),
        "sixteen clicks": dict(points=rng.uniform(0, s, (16, 2)).tolist(), labels=[1, 0] * 8),
        "box": dict(box=[0.1 * s, 0.2 * s, 0.6 * s, 0.9 * s]),
        "box and click": dict(
            box=[0.1 * s, 0.2 * s, 0.6 * s, 0.9 * s], points=[[0.3 * s, 0.6 * s]], labels=[0]
        ),
        "mask only": dict(mask=rng.normal(0, 6, (m, m)).clip(-30, 30)),
        "click and mask": dict(
            points=[[0.5 * s, 0.5 * s]], labels=[1], mask=rng.normal(0, 6, (m, m)).clip(-30, 30)
        ),
        "nothing": dict(),
    }


CASE_NAMES = list(cases(112, 32))


def assert_matches(got: dict, want_multi) -> None:
    masks, iou, low = want_multi
    pairs = {
        "pvs_masks (clamped as the predictor returns them)": (
            np.clip(got[contract.PVS_DECODER_MASKS][0], -32, 32),
            low,
        ),
        "pvs_iou": (got[contract.PVS_DECODER_IOU][0], iou),
    }
    for name, (a, b) in pairs.items():
        assert a.shape == b.shape, name
        diff = float(np.abs(a - b).max())
        assert diff <= TOL, f"{name}: max|diff| {diff:.3g}"
    # The client's upscaling of the graph's logits vs the predictor's full-size logits. torch
    # computes its interpolation coordinates in float32 (ours: float64), a relative ~1e-5
    # difference, hence the tolerance scaled by the logits; the masks agree wherever the
    # logits are not within that tolerance of the threshold.
    up = upscale_logits(got[contract.PVS_DECODER_MASKS][0], masks.shape[-1])
    tol = TOL + UPSCALE_RTOL * float(np.abs(masks).max())
    assert float(np.abs(up - masks).max()) <= tol, "upscaled masks"
    decided = np.abs(masks) > tol
    np.testing.assert_array_equal((up > 0)[decided], (masks > 0)[decided])
    np.testing.assert_array_equal(
        np.argsort(-got[contract.PVS_DECODER_IOU][0], kind="stable"),
        np.argsort(-iou, kind="stable"),
    )


@pytest.mark.parametrize("case", CASE_NAMES)
def test_click_matches_official(ort_repo, features, official, dims, case):
    prompt = cases(dims.s, dims.m)[case]
    got = click(ort_repo, features, dims, **prompt)
    kw = official_kwargs(**prompt)
    assert_matches(got, official(multimask_output=True, **kw))


def test_refinement_feeds_back_the_best_logits(ort_repo, features, official, dims):
    """SAM's loop: click, take the best candidate's low-res logits, click again with them."""
    s = dims.s
    first = [[0.4 * s, 0.4 * s]]
    got = click(ort_repo, features, dims, points=first, labels=[1])
    _, iou, low = official(multimask_output=True, **official_kwargs(first, [1]))
    best_got = got[contract.PVS_DECODER_MASKS][0, int(np.argmax(got[contract.PVS_DECODER_IOU][0]))]
    best_ref = low[int(np.argmax(iou))]
    points = [*first, [0.7 * s, 0.6 * s]]
    # The graph clamps its mask input to +-32, as the predictor clamps what it returns.
    got = click(ort_repo, features, dims, points=points, labels=[1, 0], mask=best_got)
    kw = official_kwargs(points, [1, 0], mask=best_ref)
    assert_matches(got, official(multimask_output=True, **kw))


def test_grid_matches_official_batch(ort_repo, features, official, dims):
    """The automatic mode's path: a batch of single clicks, as SAM's generator decodes them."""
    b = ort_repo.manifest.pvs_grid_batch
    rng = np.random.default_rng(3)
    pts = rng.uniform(0, dims.s, (b, 1, 2)).astype(np.float32)
    got = ort_repo.run(
        contract.PVS_GRID_DECODER,
        {
            **features,
            contract.PVS_POINT_COORDS: pts,
            contract.PVS_POINT_LABELS: np.ones((b, 1), np.float32),
        },
    )
    masks, iou, low = official(point_coords=pts, point_labels=np.ones((b, 1), np.int64))
    assert float(np.abs(np.clip(got[contract.PVS_DECODER_MASKS], -32, 32) - low).max()) <= TOL
    assert float(np.abs(got[contract.PVS_DECODER_IOU] - iou).max()) <= TOL
    np.testing.assert_array_equal(
        np.argsort(-got[contract.PVS_DECODER_IOU], axis=1, kind="stable"),
        np.argsort(-iou, axis=1, kind="stable"),
    )


def test_padding_tokens_are_not_neutral_in_sam(official, dims):
    """Why empty slots are masked out of the attention: an explicit -1 point changes SAM's
    output, so filling slots with -1 points would not reproduce the official predictor."""
    s = dims.s
    _, iou_a, low_a = official(**official_kwargs([[0.3 * s, 0.6 * s]], [1]))
    _, iou_b, low_b = official(**official_kwargs([[0.3 * s, 0.6 * s], [0, 0]], [1, -1]))
    assert float(np.abs(low_a - low_b).max()) > 1e-3


def test_empty_slots_are_ignored_whatever_they_hold(ort_repo, features, dims):
    s, m = dims.s, dims.m
    clean = prompt_arrays(s, m, points=[[0.3 * s, 0.6 * s]], labels=[1])
    dirty = {k: v.copy() for k, v in clean.items()}
    dirty[contract.PVS_POINT_COORDS][0, 1:] = np.random.default_rng(0).uniform(-50, 500, (15, 2))
    dirty[contract.PVS_POINT_COORDS][0, 6] = np.nan
    dirty[contract.PVS_POINT_LABELS][0, 1:6] = [-1, 2, 3, 7, np.nan]  # not 0/1: empty slots too
    dirty[contract.PVS_BOX][0] = [5, np.nan, 70, 80]  # has_box is False
    dirty[contract.PVS_MASK_INPUT][:] = np.nan  # has_mask is False
    a = ort_repo.run(contract.PVS_DECODER, {**features, **clean})
    b = ort_repo.run(contract.PVS_DECODER, {**features, **dirty})
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-6, err_msg=name)


def test_bad_prompts_are_clipped_not_crashed(ort_repo, features, dims):
    """Documented clipping: points and boxes clamp to [0, S], box corners are sorted, mask
    logits clamp to +-32. The client refuses such prompts earlier; the graph never fails."""
    s, m = dims.s, dims.m

    def run(**prompt):
        out = click(ort_repo, features, dims, **prompt)
        for name, value in out.items():
            assert np.isfinite(value).all(), name
        return out

    def same(a, b):
        for name in a:
            np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-6, err_msg=name)

    same(run(points=[[-40.0, s + 100.0]], labels=[1]), run(points=[[0.0, float(s)]], labels=[1]))
    upright = [0.2 * s, 0.3 * s, 0.7 * s, 0.9 * s]
    inverted = [upright[2], upright[3], upright[0], upright[1]]
    same(run(box=inverted), run(box=upright))
    same(run(box=[-10, -10, s + 10, s + 10]), run(box=[0, 0, s, s]))
    run(box=[0.5 * s, 0.5 * s, 0.5 * s, 0.5 * s])  # zero area: two identical corners
    big = np.full((m, m), 1e6, np.float32)
    same(run(mask=big), run(mask=np.full((m, m), 32.0, np.float32)))


@pytest.mark.parametrize(
    "name, value",
    [
        (contract.PVS_MASK_INPUT, np.zeros((1, 1, 17, 17), np.float32)),
        (contract.PVS_POINT_COORDS, np.zeros((1, 3, 2), np.float32)),
        (contract.PVS_HAS_MASK, np.zeros((1,), np.float32)),
    ],
)
def test_wrong_shapes_or_dtypes_are_clear_errors(ort_repo, features, dims, name, value):
    feeds = {**features, **prompt_arrays(dims.s, dims.m, points=[[5, 5]], labels=[1])}
    feeds[name] = value
    with pytest.raises(Exception, match=rf"{name}|data type"):
        ort_repo.run(contract.PVS_DECODER, feeds)


def test_end_to_end_through_the_encoder(ort_repo, eager, images, head, dims):
    """Exported encoder -> exported PVS decoder vs the official set_image + predict_inst."""
    vision = ort_repo.encode(images.a)
    s = dims.s
    prompt = dict(points=[[0.25 * s, 0.5 * s], [0.6 * s, 0.4 * s]], labels=[1, 0])
    got = click(ort_repo, {n: vision[n] for n in contract.PVS_FEATURES}, dims, **prompt)
    ref = eager.backbone(images.a, "x")["sam2_backbone_out"]["backbone_fpn"]
    official = Official(head, project(head, ref))
    kw = official_kwargs(**prompt)
    assert_matches(got, official(multimask_output=True, **kw))


def test_graph_signatures_and_manifest(ort_repo, head):
    import onnx

    from sam3_export.graphs.pvs_decoder import PVS_GRID_BATCH, PVS_GRID_POINTS, pvs_graph_io

    m = ort_repo.manifest
    assert m.pvs_points == contract.PVS_POINTS
    assert m.pvs_grid_batch == PVS_GRID_BATCH
    assert m.pvs_grid_points == PVS_GRID_POINTS == 1
    assert m.pvs_mask_input_size == m.mask_size
    for name in contract.PVS_GRAPHS:
        io = pvs_graph_io(name, head)
        assert m.graph_io(name) == io
        model = onnx.load(str(contract.graph_path(ort_repo.root, name)), load_external_data=False)
        assert model.opset_import[0].version == 18
        init = {i.name for i in model.graph.initializer}
        inputs = [v for v in model.graph.input if v.name not in init]
        got = [
            (v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
            for v in [*inputs, *model.graph.output]
        ]
        assert got == [(t.name, t.shape) for t in (*io.inputs, *io.outputs)]


def test_export_pvs_decoder_other_slot_counts(tmp_path):
    """`export_pvs_decoder` on a bare tiny head, 4 slots, grid batch 4: ORT == the wrapper."""
    import onnxruntime as ort

    from sam3_export.graphs.pvs_decoder import PvsDecoder, PvsGridDecoder, export_pvs_decoder
    from sam3_export.model import randomize_
    from sam3_export.pvs_model import PvsDims, build_pvs_predictor

    predictor = build_pvs_predictor(PvsDims.tiny())
    randomize_(predictor, 7)
    specs = export_pvs_decoder(predictor, tmp_path, size=112, points=4, grid_batch=4)
    assert set(specs) == set(contract.PVS_GRAPHS)
    levels = random_levels(predictor, seed=2)
    rng = np.random.default_rng(0)
    for name, module in (
        (contract.PVS_DECODER, PvsDecoder),
        (contract.PVS_GRID_DECODER, PvsGridDecoder),
    ):
        io = specs[name]
        feeds = image_features(predictor, levels)
        for t in io.inputs[len(feeds) :]:
            if t.dtype == "bool":
                feeds[t.name] = rng.integers(0, 2, t.shape).astype(bool)
            elif t.name == contract.PVS_POINT_LABELS:
                feeds[t.name] = rng.integers(-1, 2, t.shape).astype(np.float32)
            else:
                feeds[t.name] = rng.uniform(0, 112, t.shape).astype(np.float32)
        session = ort.InferenceSession(
            str(contract.graph_path(tmp_path, name)), providers=["CPUExecutionProvider"]
        )
        got = session.run(None, feeds)
        with torch.no_grad():
            want = module(predictor)(*[torch.from_numpy(feeds[t.name]) for t in io.inputs])
        for t, a, b in zip(io.outputs, got, want, strict=True):
            assert a.shape == t.shape
            assert float(np.abs(a - b.numpy()).max()) <= TOL, t.name
    with pytest.raises(ValueError, match="image size"):
        export_pvs_decoder(predictor, tmp_path, size=1008)


def test_builder_has_the_official_layout(monkeypatch):
    """`build_pvs_predictor` at full size == `build_tracker`'s state dict (names, shapes)."""
    import sam3.model_builder as builder
    from sam3.model.position_encoding import PositionEmbeddingSine

    from sam3_export.pvs_model import PvsDims, build_pvs_predictor, sizes_of_tracker

    init = PositionEmbeddingSine.__init__

    def cpu_init(self, *args, precompute_resolution=None, **kwargs):
        init(self, *args, **kwargs)  # the official pre-computes its cache on "cuda"

    monkeypatch.setattr(PositionEmbeddingSine, "__init__", cpu_init)
    official = builder.build_tracker(apply_temporal_disambiguation=False)
    ours = build_pvs_predictor(PvsDims.full())
    want = {k: tuple(v.shape) for k, v in official.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in ours.model.state_dict().items()}
    assert got == want
    assert ours._bb_feat_sizes == [(288, 288), (144, 144), (72, 72)]
    assert sizes_of_tracker(ours) == contract.Sizes(1008, 256, 0)
    assert PvsDims.full().embed_size == 72 and PvsDims.full().low_res_size == 288

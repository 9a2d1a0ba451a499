"""Sam3Client on the embedded engine: the notebook workflows, and what bad input gets."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from napari_sam3 import Concept, Sam3Client
from napari_sam3.client.results import FrameMask


def test_text_prompt_returns_detections_in_original_pixels(local_client, s2_crop):
    df = local_client.segment(s2_crop, "building", score_thr=0.0, dedup=None)
    rows, cols = s2_crop.data.shape[1:]
    assert list(df.columns[:5]) == ["box", "score", "mask", "keyword", "prompt_kind"]
    assert len(df) == local_client.manifest.num_queries
    assert np.all(np.diff(df["score"].values) <= 0)
    boxes = np.stack(df["box"].values)
    assert boxes.min() >= 0 and boxes[:, 2].max() <= cols and boxes[:, 3].max() <= rows
    mask = df["mask"].iloc[0]
    assert isinstance(mask, FrameMask)
    assert np.asarray(mask).shape == (rows, cols)
    assert set(df["keyword"]) == {"building"} and set(df["prompt_kind"]) == {"text"}


def test_threshold_max_det_and_dedup_reduce_results(local_client, s2_crop):
    everything = local_client.segment(s2_crop, "building", score_thr=0.0, dedup=None)
    top = local_client.segment(s2_crop, "building", score_thr=0.0, max_det=3, dedup=None)
    assert len(top) == 3
    np.testing.assert_allclose(top["score"].values, everything["score"].values[:3])
    cut = float(everything["score"].median())
    above = local_client.segment(s2_crop, "building", score_thr=cut, dedup=None)
    assert len(above) == int(np.sum(everything["score"].values >= cut))
    deduped = local_client.segment(s2_crop, "building", score_thr=0.0, dedup=0.5)
    assert 0 < len(deduped) <= len(everything)


def test_positive_and_negative_exemplars_change_the_result(local_client, s2_crop):
    box = [[40, 30, 140, 120]]
    text = local_client.segment(s2_crop, "building", score_thr=0.0, dedup=None)
    positive = local_client.segment(s2_crop, "building", box, [1], score_thr=0.0, dedup=None)
    negative = local_client.segment(s2_crop, "building", box, [0], score_thr=0.0, dedup=None)
    assert set(positive["prompt_kind"]) == {"text+exemplar"}
    assert not np.allclose(positive["score"].values, text["score"].values)
    assert not np.allclose(positive["score"].values, negative["score"].values)


def test_pure_visual_query_without_text(local_client, s2_crop):
    df = local_client.segment(s2_crop, exemplar_boxes=[[40, 30, 140, 120]], score_thr=0.0)
    assert len(df) > 0 and set(df["prompt_kind"]) == {"exemplar"}


def test_multi_matches_segment_per_keyword(local_client, s2_crop):
    keywords = ["building", "road", "water"]
    multi = local_client.multi(s2_crop, keywords, score_thr=0.0, dedup=None)
    assert list(pd.unique(multi["keyword"])) == keywords
    for keyword in keywords:
        alone = local_client.segment(s2_crop, keyword, score_thr=0.0, dedup=None)
        part = multi[multi["keyword"] == keyword]
        np.testing.assert_allclose(part["score"].values, alone["score"].values, atol=1e-6)


def test_concept_survives_bytes_and_a_new_process(
    local_client, s2_crop, s2_rgb_paths, tiny_repository, tmp_path
):
    from napari_sam3.imagery.raster import read_raster

    concept = local_client.encode_exemplars(
        s2_crop, [[40, 30, 140, 120], [200, 100, 260, 160]], [1, 0], name="roofs"
    )
    assert concept.n_positive == 1 and concept.n_negative == 1
    path = concept.save(tmp_path / "roofs.npz")
    other = read_raster(s2_rgb_paths, window=np.s_[400:700, 800:1220])
    here = local_client.segment(other, "building", concept=concept, score_thr=0.0, dedup=None)
    script = (
        "import sys, numpy as np\n"
        "from napari_sam3 import Sam3Client, Concept\n"
        "from napari_sam3.imagery.raster import read_raster\n"
        "c = Sam3Client.local(sys.argv[1], precision='fp32')\n"
        "concept = Concept.load(sys.argv[2])\n"
        "r = read_raster(sys.argv[3:], window=np.s_[400:700, 800:1220])\n"
        "df = c.segment(r, 'building', concept=concept, score_thr=0.0, dedup=None)\n"
        "print(' '.join(f'{s:.6f}' for s in df['score']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tiny_repository), str(path), *map(str, s2_rgb_paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    there = np.array([float(v) for v in out.stdout.split()])
    np.testing.assert_allclose(there, here["score"].values, atol=1e-5)
    with pytest.raises(FileExistsError):
        concept.save(path)


def test_concept_from_another_model_is_refused(local_client, s2_crop):
    concept = local_client.encode_exemplars(s2_crop, [[40, 30, 140, 120]])
    alien = Concept.from_bytes(concept.to_bytes())
    alien.model_id = "0" * 64
    with pytest.raises(ValueError, match="re-encode"):
        local_client.segment(s2_crop, "building", concept=alien)
    with pytest.raises(ValueError, match="concept"):
        Concept.from_bytes(b"definitely not an npz")


def test_interactive_session(local_client, s2_crop):
    rows, cols = s2_crop.data.shape[1:]
    session = local_client.interactive(s2_crop)
    first = session.add_point((100, 80))
    assert len(first) == 3 and np.all(np.diff(first["iou"].values) <= 0)
    assert np.asarray(first["mask"][0]).shape == (rows, cols)
    second = session.add_point((250, 200), positive=False)
    boxed = session.add_box([50, 40, 300, 250])
    assert not np.allclose(boxed["iou"].values, second["iou"].values)
    painted = np.zeros((rows, cols), bool)
    painted[100:180, 120:260] = True
    seeded = session.add_mask(painted)
    assert len(seeded) == 3
    back = session.undo()
    np.testing.assert_allclose(back["iou"].values, boxed["iou"].values)
    session.reset()
    assert session.result is None and session.prompts.empty
    again = session.add_point((100, 80))
    np.testing.assert_allclose(again["iou"].values, first["iou"].values, atol=1e-6)


def test_bad_inputs_get_clear_errors(local_client, s2_crop):
    image = np.zeros((64, 80, 3), np.uint8)
    with pytest.raises(ValueError, match="nothing to look for"):
        local_client.segment(image)
    with pytest.raises(TypeError, match="prompt must be a string"):
        local_client.segment(image, 42)
    with pytest.raises(ValueError, match="empty"):
        local_client.segment(image, "   ")
    with pytest.raises(ValueError, match="outside"):
        local_client.segment(image, "x", exemplar_boxes=[[500, 500, 600, 600]])
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        local_client.segment(image, "x", exemplar_boxes=[[1, 2, 3]])
    with pytest.raises(ValueError, match="at most"):
        local_client.segment(image, "x", exemplar_boxes=[[1, 1, 5, 5]] * 9)
    with pytest.raises(ValueError, match="exemplar_labels"):
        local_client.segment(image, "x", exemplar_boxes=[[1, 1, 5, 5]], exemplar_labels=[2])
    with pytest.raises(ValueError, match="score_thr"):
        local_client.segment(image, "x", score_thr=1.5)
    with pytest.raises(ValueError, match="max_det"):
        local_client.segment(image, "x", max_det=0)
    with pytest.raises(ValueError, match="nothing to look for"):
        local_client.multi(image, [])
    with pytest.raises(TypeError, match="list of strings"):
        local_client.multi(image, "building")
    with pytest.raises(ValueError, match="at most 8"):
        local_client.multi(image, [f"k{i}" for i in range(9)])
    with pytest.raises(TypeError, match="image must be"):
        local_client.segment(12, "x")
    with pytest.raises(ValueError):
        local_client.segment(np.zeros((0, 5, 3), np.uint8), "x")
    with pytest.raises(FileNotFoundError):
        local_client.segment("no/such/file.tif", "x")
    session = local_client.interactive(image)
    with pytest.raises(ValueError, match="outside"):
        session.add_point((500, 10))
    with pytest.raises(ValueError, match="inverted|zero area"):
        session.add_box([30, 30, 10, 40])
    with pytest.raises(ValueError, match="shape"):
        session.add_mask(np.ones((10, 10), bool))
    with pytest.raises(ValueError, match="nothing to undo"):
        session.undo()
    with pytest.raises(FileNotFoundError, match="sam3-export"):
        Sam3Client.local("no/such/repository")


def test_thresholds_and_counts_report_the_value_given_and_the_range(local_client):
    image = np.zeros((64, 80, 3), np.uint8)
    # max_det travels as int32: the client must refuse 10**12 itself, not let it wrap.
    too_many = r"max_det must be an integer from 1 to 2147483647, got 1000000000000$"
    with pytest.raises(ValueError, match=too_many):
        local_client.segment(image, "x", max_det=10**12)
    with pytest.raises(ValueError, match=too_many):
        local_client.multi(image, ["x", "y"], max_det=10**12)
    with pytest.raises(ValueError, match=r"max_det must be an integer from 1 .*got 2\.0$"):
        local_client.segment(image, "x", max_det=2.0)
    with pytest.raises(ValueError, match=r"mask_thr must be within \(0, 1\), got 1\.0$"):
        local_client.segment(image, "x", mask_thr=1.0)
    with pytest.raises(ValueError, match=r"dedup must be within \(0, 1\], got 0 \(or None"):
        local_client.segment(image, "x", dedup=0)
    with pytest.raises(ValueError, match=r"score_thr must be a number within \[0, 1\], got nan"):
        local_client.multi(image, ["x"], score_thr=float("nan"))
    with pytest.raises(ValueError, match=r"exemplar boxes contain NaN or infinity"):
        local_client.encode_exemplars(image, [[1, 1, np.inf, 5]])
    with pytest.raises(ValueError, match=r"box 0 \[9\.0, 1\.0, 5\.0, 5\.0\] is not"):
        local_client.segment(image, "x", exemplar_boxes=[[9, 1, 5, 5]])
    # At the edge of the range the request goes through.
    assert len(local_client.segment(image, "x", score_thr=1.0, max_det=2**31 - 1)) == 0


def test_everything_reuses_the_encoder_and_returns_full_frame_masks(local_client, s2_crop):
    rows, cols = s2_crop.data.shape[1:]
    session = local_client.interactive(s2_crop)
    relaxed = {"pred_iou_thresh": 0.0, "stability_score_thresh": 0.0, "min_area": 1}
    df = session.everything(points_per_side=4, **relaxed)
    assert 0 < len(df) <= 4 * 4 * 3
    assert set(df["prompt_kind"]) == {"everything"}
    assert np.all(np.diff(df["iou"].values) <= 0)
    for mask, box in zip(df["mask"], df["box"], strict=True):
        dense = np.asarray(mask)
        assert dense.shape == (rows, cols) and dense.any()
        ys, xs = np.nonzero(dense)
        assert xs.min() >= box[0] - 2 and xs.max() <= box[2] + 2
    strict = session.everything(points_per_side=4, **{**relaxed, "pred_iou_thresh": 0.99})
    assert len(strict) < len(df)


def test_multi_with_concepts_matches_segment_on_one_vision_pass(local_client, s2_crop):
    concept = local_client.encode_exemplars(s2_crop, [[40, 30, 140, 120]], name="roofs")
    multi = local_client.multi(s2_crop, ["road"], concepts=[concept], score_thr=0.0, dedup=None)
    assert list(pd.unique(multi["keyword"])) == ["road", "roofs"]
    part = multi[multi["keyword"] == "roofs"]
    assert set(part["prompt_kind"]) == {"concept"}
    alone = local_client.segment(s2_crop, concept=concept, score_thr=0.0, dedup=None)
    np.testing.assert_allclose(part["score"].values, alone["score"].values, atol=1e-6)
    only = local_client.multi(s2_crop, concepts={"a": concept, "b": concept}, score_thr=0.0)
    assert set(only["keyword"]) <= {"a", "b"} and len(only) > 0


def test_close_releases_the_embedded_engine(tiny_repository, s2_crop):
    with Sam3Client.local(tiny_repository, precision="fp32") as client:
        assert len(client.segment(s2_crop, "building", score_thr=0.0)) > 0
        assert client.engine._runners  # ONNX Runtime sessions held
    assert not client.engine._runners
    with pytest.raises(RuntimeError, match="closed; make a new Sam3Client"):
        client.segment(s2_crop, "building")


def test_close_closes_the_grpc_channels(triton_server, s2_crop):
    with Sam3Client(triton_server.grpc_address, connect_timeout=30) as client:
        assert len(client.segment(s2_crop, "building", score_thr=0.0)) > 0
        channels = list(client.engine._clients)
    with pytest.raises(ConnectionError, match="closed; make a new Sam3Client"):
        client.segment(s2_crop, "building")
    for raw in channels:  # the channel itself is shut, not only our flag
        with pytest.raises(ValueError, match="closed channel"):
            raw.is_server_live()

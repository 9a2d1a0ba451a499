"""In process, masks are handed over as they are made: no wire format, the same detections.

The embedded engine runs the model code in the client's process, so its answers carry the
masks themselves (`RlePayload`); the RLE bytes of docs/rle.md are made only where a result
leaves a process (Triton's Python backend). The same prompts through a real tritonserver, where
every answer crosses the wire, must give identical detections.
"""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.client import interactive as interactive_module
from napari_sam3.masks import rle as rle_module
from napari_sam3.masks.rle import RleMasks, RlePayload, as_rle_masks, encode_masks
from napari_sam3.runtime.postprocess import postprocess_masks


def _session(client, image) -> dict:
    """Every kind of answer with masks: text, multi, re-filters, clicks."""
    handle = client.image(image)
    out = {"text": handle.segment("building", score_thr=0.0, dedup=None)}
    out["text, dedup"] = handle.segment("building", score_thr=0.0)
    scores = out["text, dedup"]["score"].to_numpy()
    middle = float(np.median(scores)) if len(scores) else 0.5
    out["refilter"] = handle.refilter(score_thr=middle)
    out["refilter, max_det"] = handle.refilter(score_thr=0.0, max_det=3, dedup=0.5)
    out["multi"] = handle.multi(["building", "road", "water"], score_thr=0.0)
    out["multi refilter"] = handle.refilter(score_thr=middle)
    session = handle.interactive()
    out["click"] = session.add_point((100, 80))
    out["second click"] = session.add_point((150, 100), positive=False)
    return out


def _same(a, b, name) -> None:
    assert list(a.columns) == list(b.columns), name
    assert len(a) == len(b), name
    for column in ("score", "iou"):
        if column in a:
            np.testing.assert_array_equal(a[column].to_numpy(), b[column].to_numpy(), name)
    for column in ("keyword",):
        if column in a:
            assert a[column].tolist() == b[column].tolist(), name
    if len(a):
        np.testing.assert_array_equal(np.stack(a["box"]), np.stack(b["box"]), name)
    for m, n in zip(a["mask"], b["mask"], strict=True):
        np.testing.assert_array_equal(np.asarray(m), np.asarray(n), name)


def test_the_embedded_engine_never_writes_or_parses_the_wire_format(
    tiny_repository, s2_crop, monkeypatch
):
    def refuse(*args, **kwargs):
        raise AssertionError("the RLE wire format was used in-process")

    client = Sam3Client.local(tiny_repository, precision="fp32")
    try:
        client.segment(np.asarray(s2_crop.data), "warm up")  # graphs loaded, as any later call
        monkeypatch.setattr(rle_module, "_pack", refuse)
        monkeypatch.setattr(rle_module, "_unpack", refuse)
        results = _session(client, np.asarray(s2_crop.data))
    finally:
        client.close()
    assert len(results["text"]) > 0 and len(results["multi"]) > 0 and len(results["click"]) == 3
    # the masks are usable (pixels, boxes) with the codec refused
    for frame in results.values():
        for mask in frame["mask"]:
            assert np.asarray(mask).shape == s2_crop.data.shape[1:]


@pytest.mark.needs_tritonserver
def test_in_process_and_over_the_wire_give_identical_detections(
    tiny_repository, triton_server, s2_crop
):
    image = np.asarray(s2_crop.data)
    embedded = Sam3Client.local(tiny_repository, precision="fp32")
    remote = Sam3Client(triton_server.grpc_address)
    try:
        remote.clear_cache()
        local_results = _session(embedded, image)
        wire_results = _session(remote, image)
    finally:
        remote.clear_cache()
        embedded.close()
        remote.close()
    assert len(local_results["text"]) > 1
    for name, frame in local_results.items():
        _same(frame, wire_results[name], name)


def test_a_click_in_process_makes_the_best_mask_and_the_others_when_looked_at(
    tiny_repository, s2_crop, monkeypatch
):
    image = np.asarray(s2_crop.data)
    made = []
    real = interactive_module.threshold_masks

    def counted(logits, size, cut):
        made.append(len(logits))
        return real(logits, size, cut)

    client = Sam3Client.local(tiny_repository, precision="fp32")
    try:
        session = client.interactive(image)
        monkeypatch.setattr(interactive_module, "threshold_masks", counted)
        frame = session.add_point((100, 80))
        assert made == [1]  # the best candidate only, which the viewer shows at once
        assert "not made yet" in repr(frame["mask"].iloc[1])
        second = np.asarray(frame["mask"].iloc[1])
        assert made == [1, 1]
        np.testing.assert_array_equal(np.asarray(frame["mask"].iloc[1]), second)
        assert made == [1, 1]  # made once
        masks = [np.asarray(m) for m in frame["mask"]]
        assert made == [1, 1, 1] and all(m.shape == image.shape[1:] for m in masks)
        # the boxes, found before the masks were made, are the masks' own boxes
        model_boxes = np.array([m.rle.bbox for m in frame["mask"]], np.float32)
        np.testing.assert_array_equal(
            np.stack(frame["box"]), session.letterbox.boxes_to_image(model_boxes)
        )
    finally:
        client.close()


def test_a_payload_is_the_batch_in_process_and_its_bytes_across_a_process():
    rng = np.random.default_rng(0)
    dense = rng.random((4, 9, 13)) < 0.4
    batch = RleMasks.from_dense(dense)
    payload = RlePayload(batch)
    assert as_rle_masks(payload) is batch  # taken as it is
    wire = np.ascontiguousarray(payload)  # what Triton's Python backend sends
    assert wire.dtype == np.uint8 and wire.tobytes() == encode_masks(dense)
    np.testing.assert_array_equal(as_rle_masks(wire).to_dense(), dense)
    # the request's limits hold for both
    for value in (payload, wire):
        with pytest.raises(ValueError, match="at most 3"):
            as_rle_masks(value, (9, 13), max_count=3)
        with pytest.raises(ValueError, match="claims masks of 9x13"):
            as_rle_masks(value, (13, 9))
    with pytest.raises(ValueError, match="holds RleMasks"):
        RlePayload(dense)


@pytest.mark.parametrize(("score_thr", "max_det"), [(0.0, 200), (0.3, 200), (0.0, 5), (0.6, 7)])
def test_masks_only_for_survivors_equal_filtering_everything(score_thr, max_det):
    """score_thr and max_det decided on the scores first: the masks made for the survivors are
    those of all candidates, filtered afterwards."""
    rng = np.random.default_rng(1)
    n, m, size = 40, 16, 64
    logits = rng.normal(0, 2, n).astype(np.float32)
    boxes = np.sort(rng.random((n, 4)).astype(np.float32), axis=1)[:, [0, 1, 2, 3]]
    low_res = rng.normal(0, 1, (1, n, m, m)).astype(np.float32)
    presence = np.array([1.5], np.float32)
    s_all, b_all, masks_all = postprocess_masks(
        logits, boxes, low_res, presence, size, score_thr=0.0, max_det=n
    )
    keep = np.flatnonzero(s_all >= np.float32(score_thr))[:max_det]
    s, b, masks = postprocess_masks(
        logits, boxes, low_res, presence, size, score_thr=score_thr, max_det=max_det
    )
    assert 0 < len(s) < n or (score_thr, max_det) == (0.0, 200)
    np.testing.assert_array_equal(s, s_all[keep])
    np.testing.assert_array_equal(b, b_all[keep])
    assert masks.to_bytes() == masks_all.take(keep).to_bytes()

"""The caches' bounds in bytes: the answers held to re-filter, and `client.cache_limits`, which a
scene run uses so that tiles, seen once, fill no cache (embedded engine, tiny model, real crop)."""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.core.errors import InvalidInput


@pytest.fixture
def client(tiny_repository):
    made = Sam3Client.local(tiny_repository, precision="fp32")
    yield made
    made.close()


def _image(s2_crop, flip: bool = False) -> np.ndarray:
    data = np.asarray(s2_crop.data)
    return np.ascontiguousarray(data[:, :, ::-1]) if flip else data


def test_answers_are_held_within_their_bytes(client, s2_crop):
    image = _image(s2_crop)
    client.segment(image, "building", score_thr=0.0, dedup=None)
    one = client.cache_info()["results"]
    assert one["entries"] == 1 and one["bytes"] > 0
    assert client.segment(image, "building", score_thr=0.5).attrs["cache"] == "refiltered"
    # a bound below that answer's bytes: it goes at once, and no answer of its size is kept
    with client.cache_limits(results_bytes=one["bytes"] - 1):
        assert client.cache_info()["results"]["entries"] == 0
        client.segment(image, "building", score_thr=0.0, dedup=None)  # the same answer again
        assert client.cache_info()["results"]["entries"] == 0
        assert client.segment(image, "building", score_thr=0.5).attrs["cache"] == "hit"
    # room for both: the answers of two images are held side by side
    with client.cache_limits(results_bytes=one["bytes"] * 100):
        client.segment(image, "building", score_thr=0.0, dedup=None)
        client.segment(_image(s2_crop, flip=True), "building", score_thr=0.0, dedup=None)
        assert client.cache_info()["results"]["entries"] == 2
    assert client.cache_info()["results"]["max_bytes"] == one["max_bytes"]  # restored


def test_cache_limits_bound_the_engine_caches_for_the_block_only(client, s2_crop):
    image = _image(s2_crop)
    before = client.cache_info()
    one_image = before["image_bytes"]
    with client.cache_limits(one_image, heads_bytes=0, results_bytes=0):
        client.segment(image, "building", score_thr=0.0)
        client.segment(_image(s2_crop, flip=True), "road", score_thr=0.0)
        inside = client.cache_info()
        assert inside["features"]["max_bytes"] == one_image
        assert inside["features"]["entries"] == 1  # the first image was evicted for the second
        assert inside["heads"]["entries"] == 0 and inside["results"]["entries"] == 0
        # nothing held to re-filter: a stricter threshold asks the model again
        again = client.segment(_image(s2_crop, flip=True), "road", score_thr=0.5)
        assert again.attrs["cache"] == "hit"
    after = client.cache_info()
    for part in ("features", "heads", "results"):
        assert after[part]["max_bytes"] == before[part]["max_bytes"], part


@pytest.mark.parametrize(
    ("bounds", "match"),
    [
        ({"results_bytes": -1}, "results_bytes must be an integer"),
        ({"heads_bytes": True}, "heads_bytes must be an integer"),
        ({"features_bytes": 10}, "holds no image"),
    ],
)
def test_bounds_that_cannot_work_are_refused_and_change_nothing(client, bounds, match):
    before = client.cache_info()
    with pytest.raises((InvalidInput, ValueError), match=match):
        with client.cache_limits(**bounds):
            pass
    after = client.cache_info()
    for part in ("features", "heads", "results"):
        assert after[part]["max_bytes"] == before[part]["max_bytes"], part

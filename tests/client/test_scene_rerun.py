"""Scene tiles run again (another prompt, other thresholds) reuse each tile's features."""

from __future__ import annotations

import numpy as np

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.scene import segment_scene


def _encoder_runs(client) -> int:
    return int(client.engine.statistics(contract.ENCODER)["model_stats"][0]["execution_count"])


def test_a_scene_run_again_encodes_no_tile(tiny_repository, s2_rgb_paths):
    client = Sam3Client.local(tiny_repository, precision="fp32")
    options = {"tile_size": 512, "overlap": 64, "score_thr": 0.0, "progress": False}
    before = _encoder_runs(client)
    first = segment_scene(client, s2_rgb_paths, "building", **options)
    tiles = len(first.attrs["tiles"])
    assert tiles == 8 and _encoder_runs(client) - before == tiles
    again = segment_scene(client, s2_rgb_paths, keywords=["road", "water"], **options)
    assert _encoder_runs(client) - before == tiles  # every tile's features were held
    client.clear_cache()
    fresh = segment_scene(client, s2_rgb_paths, keywords=["road", "water"], **options)
    assert _encoder_runs(client) - before == 2 * tiles
    assert len(again) == len(fresh) > 0
    np.testing.assert_array_equal(again["score"].to_numpy(), fresh["score"].to_numpy())
    for a, b in zip(again["mask"], fresh["mask"], strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))

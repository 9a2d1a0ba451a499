"""The tile grid and SceneMask: coverage, overlap, crops and windows."""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3.imagery.raster import raster_info
from napari_sam3.scene import SceneMask, tile_grid


def _coverage(rows: int, cols: int, tiles) -> np.ndarray:
    count = np.zeros((rows, cols), np.int32)
    for t in tiles:
        r0, c0, r1, c1 = t.bounds
        assert 0 <= r0 < r1 <= rows and 0 <= c0 < c1 <= cols
        count[r0:r1, c0:c1] += 1
    return count


@pytest.mark.parametrize(("tile", "overlap"), [(112, 14), (256, 32), (512, 0), (1008, 126)])
def test_tiling_covers_every_pixel_of_the_sentinel2_scene(s2_rgb_paths, tile, overlap):
    info = raster_info(s2_rgb_paths)
    tiles = tile_grid(info.rows, info.cols, tile, overlap)
    assert (_coverage(info.rows, info.cols, tiles) >= 1).all()
    assert [t.index for t in tiles] == list(range(len(tiles)))
    # Whole tiles wherever the scene is at least a tile long.
    for t in tiles:
        assert t.height == min(tile, info.rows) and t.width == min(tile, info.cols)
    # Neighbours along a row overlap by at least `overlap`.
    cols = sorted({t.col for t in tiles})
    assert all(
        a + min(tile, info.cols) - b >= overlap for a, b in zip(cols, cols[1:], strict=False)
    )


@pytest.mark.parametrize(
    ("rows", "cols", "tile", "overlap"),
    [(1, 1, 8, 0), (50, 80, 100, 10), (100, 100, 100, 50), (101, 1000, 100, 50), (997, 13, 64, 7)],
)
def test_tiling_edge_cases(rows, cols, tile, overlap):
    tiles = tile_grid(rows, cols, tile, overlap)
    assert (_coverage(rows, cols, tiles) >= 1).all()
    if rows <= tile and cols <= tile:
        assert len(tiles) == 1 and (tiles[0].height, tiles[0].width) == (rows, cols)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 10, 8, 0), "rows"),
        ((10, 10, 0, 0), "tile_size"),
        ((10, 10, 8, 5), "half the tile"),
        ((10, 10, 8, -1), "half the tile"),
        ((10, 10, 8, 1.5), "whole number"),
    ],
)
def test_tiling_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        tile_grid(*args)


def test_scene_mask_crop_window_and_dense_agree():
    rng = np.random.default_rng(7)
    scene = (60, 90)
    dense = np.zeros(scene, bool)
    dense[10:40, 20:70] = rng.random((30, 50)) > 0.5
    mask = SceneMask.from_crop(dense[5:50, 15:80], 5, 15, scene)
    assert mask.shape == scene
    assert mask.area == int(dense.sum())
    rows, cols = np.nonzero(dense)
    assert mask.bbox == (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)
    np.testing.assert_array_equal(np.asarray(mask), dense)
    r0, c0, crop = mask.crop()
    np.testing.assert_array_equal(crop, dense[r0 : r0 + crop.shape[0], c0 : c0 + crop.shape[1]])
    for window in [
        (0, 0, 60, 90),
        (12, 25, 13, 69),
        (0, 0, 11, 21),
        (39, 69, 60, 90),
        (50, 0, 60, 90),
    ]:
        r0, c0, r1, c1 = window
        np.testing.assert_array_equal(mask.window(*window), dense[r0:r1, c0:c1])


def test_scene_mask_rejects_a_crop_outside_the_scene():
    with pytest.raises(ValueError, match="does not fit"):
        SceneMask.from_crop(np.ones((5, 5), bool), 8, 0, (10, 10))


def test_cross_tile_dedup_leaves_pairs_of_one_tile_to_the_client():
    """Nested detections of one tile were judged by the client already and both stay; the same
    pair from two tiles, or with a seam-merged piece, loses the smaller; keywords never mix."""
    from napari_sam3.scene.merge import Detection, dedup_across_tiles

    shape = (40, 40)
    outer = np.zeros(shape, bool)
    outer[5:25, 5:25] = True
    inner = np.zeros(shape, bool)
    inner[8:15, 8:15] = True

    def det(pixels, score, tile, merged=1, keyword="building"):
        mask = SceneMask.from_crop(pixels, 0, 0, shape)
        box = np.asarray(mask.bbox, np.float32)
        return Detection(mask, box, score, keyword, "text", tile, cut=False, merged=merged)

    def kept(dets):
        return [(d.score, d.tile) for d in dedup_across_tiles(dets, 0.85)]

    assert kept([det(outer, 0.9, 0), det(inner, 0.8, 0)]) == [(0.9, 0), (0.8, 0)]
    assert kept([det(outer, 0.9, 0), det(inner, 0.8, 1)]) == [(0.9, 0)]
    assert kept([det(outer, 0.9, 0, merged=2), det(inner, 0.8, 0)]) == [(0.9, 0)]
    assert kept([det(outer, 0.9, 0), det(inner, 0.8, 1, keyword="road")]) == [(0.9, 0), (0.8, 1)]

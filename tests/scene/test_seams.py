"""Seam merge, cross-tile dedup, nodata and georeferencing, with a stub of the per-tile call."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from napari_sam3.scene import scene_geodataframe, scene_labels, segment_scene, tile_grid


@pytest.fixture
def scene(tmp_path, geotiff):
    def make(objects, shape=(200, 300), name="scene.tif", **kwargs):
        """A uint8 RGB GeoTIFF: background 10, each (value, rows, cols) an object of that value."""
        data = np.full((3, *shape), 10, np.uint8)
        for value, rows, cols in objects:
            data[:, rows, cols] = value
        return geotiff(tmp_path / name, data, **kwargs), data

    return make


def _tiles_touching(shape, tile, overlap, rows, cols):
    seen = 0
    for t in tile_grid(*shape, tile, overlap):
        r0, c0, r1, c1 = t.bounds
        seen += r0 < rows.stop and rows.start < r1 and c0 < cols.stop and cols.start < c1
    return seen


@pytest.mark.parametrize("overlap", [20, 0])
def test_an_object_cut_by_tile_borders_is_merged_into_one(scene, tmp_path, stub, overlap):
    rows, cols = slice(30, 170), slice(40, 250)
    path, data = scene([(200, rows, cols)])
    df = segment_scene(stub, path, "field", tile_size=100, overlap=overlap, progress=False)
    assert len(df) == 1
    expected = data[0] == 200
    np.testing.assert_array_equal(np.asarray(df["mask"].iloc[0]), expected)
    assert df["merged"].iloc[0] == _tiles_touching((200, 300), 100, overlap, rows, cols) > 1
    np.testing.assert_allclose(df["box"].iloc[0], [40, 30, 250, 170])
    assert df["score"].iloc[0] == pytest.approx(200 / 255)
    assert df["keyword"].iloc[0] == "field" and df["source"].iloc[0] == "scene.tif"


def test_distinct_neighbours_across_a_seam_stay_apart(scene, tmp_path, stub):
    # Two objects meeting along column 105, inside the overlap of the first two tile columns.
    a, b = (200, slice(20, 80), slice(30, 105)), (150, slice(20, 80), slice(105, 180))
    path, data = scene([a, b])
    df = segment_scene(stub, path, "field", tile_size=100, overlap=30, progress=False)
    assert len(df) == 2
    for value, (_, row) in zip((200, 150), df.iterrows(), strict=True):  # best score first
        assert row["score"] == pytest.approx(value / 255)
        np.testing.assert_array_equal(np.asarray(row["mask"]), data[0] == value)


def test_an_object_inside_an_overlap_is_reported_once(scene, tmp_path, stub):
    tiles = tile_grid(200, 300, 100, 30)
    shared = [t for t in tiles if t.row == 0][:2]
    c0, c1 = shared[1].col, shared[0].col + shared[0].width  # the overlap's columns
    # Rows 10..40 lie in the first row of tiles only; the columns in the overlap of two tiles.
    path, data = scene([(180, slice(10, 40), slice(c0 + 3, c1 - 3))])
    df = segment_scene(stub, path, "car", tile_size=100, overlap=30, progress=False)
    assert len(df) == 1 and df["merged"].iloc[0] == 1
    np.testing.assert_array_equal(np.asarray(df["mask"].iloc[0]), data[0] == 180)
    kept = segment_scene(stub, path, "car", tile_size=100, overlap=30, dedup=None, progress=False)
    assert len(kept) == 2  # both tiles saw it; dedup=None keeps both


def test_keywords_share_a_pass_and_are_not_merged_with_each_other(scene, make_stub):
    path, _ = scene([(200, slice(30, 170), slice(40, 250))])
    stub = make_stub()
    df = segment_scene(stub, path, keywords=["a", "b"], tile_size=100, overlap=20, progress=False)
    assert sorted(df["keyword"]) == ["a", "b"]
    assert df["mask"].iloc[0].area == df["mask"].iloc[1].area == 140 * 210


def test_scene_smaller_than_a_tile_is_one_tile(scene, tmp_path, stub):
    path, data = scene([(220, slice(5, 20), slice(10, 60))], shape=(40, 70))
    df = segment_scene(stub, path, "roof", tile_size=100, progress=False)
    assert stub.tiles == [(40, 70)]
    assert len(df.attrs["tiles"]) == 1 and len(df) == 1
    np.testing.assert_array_equal(np.asarray(df["mask"].iloc[0]), data[0] == 220)


def test_nodata_tiles_skip_the_model_and_masks_avoid_nodata(tmp_path, geotiff, make_stub):
    data = np.broadcast_to(1000 + np.arange(300, dtype=np.uint16), (3, 200, 300)).copy()
    data[:, :, :130] = 0  # nodata: the whole left part
    data[:, 150:, 200:] = 0
    path = geotiff(tmp_path / "nodata.tif", data, nodata=0)
    stub = make_stub(full_tile=True)  # every tile: one object covering the whole tile
    df = segment_scene(stub, path, "field", tile_size=100, overlap=20, progress=False)
    tiles = df.attrs["tiles"]
    empty = [t for t in tiles if (data[0][t.slices] == 0).all()]
    assert df.attrs["skipped_tiles"] == len(empty) > 0
    assert len(stub.tiles) == len(tiles) - len(empty)
    valid = data[0] != 0
    assert len(df) >= 1
    for mask in df["mask"]:
        dense = np.asarray(mask)
        assert not (dense & ~valid).any()
    # Tiles more than half nodata produce nothing, so their valid pixels stay uncovered.
    covered = np.zeros_like(valid)
    for mask in df["mask"]:
        covered |= np.asarray(mask)
    for t in tiles:
        share = valid[t.slices].mean()
        if share > 0.5:
            assert covered[t.slices][valid[t.slices]].all()


def test_raster_without_crs_gives_pixel_coordinates_with_a_warning(scene, tmp_path, stub):
    path, _ = scene([(200, slice(30, 70), slice(40, 250))], crs=None)
    df = segment_scene(stub, path, "field", tile_size=100, overlap=20, progress=False)
    with pytest.warns(UserWarning, match="no CRS"):
        gdf = scene_geodataframe(df)
    assert gdf.crs is None and len(gdf) == 1
    assert gdf.geometry.iloc[0].bounds == (40.0, 30.0, 250.0, 70.0)


def test_geodataframe_and_labels_match_the_masks(scene, tmp_path, stub):
    objects = [
        (200, slice(30, 170), slice(40, 150)),
        (120, slice(20, 60), slice(180, 290)),
        (90, slice(150, 190), slice(170, 200)),
    ]
    path, data = scene(objects)
    df = segment_scene(stub, path, "x", tile_size=100, overlap=20, progress=False)
    assert len(df) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gdf = scene_geodataframe(df)
    assert gdf.crs.to_epsg() == 32633
    assert list(gdf["label_id"]) == [1, 2, 3]
    assert list(gdf["area_px"]) == [m.area for m in df["mask"]]
    assert list(gdf["tile"]) == list(df["tile"]) and list(gdf["merged"]) == list(df["merged"])
    for (_, rows, cols), geom in zip(sorted(objects, reverse=True), gdf.geometry, strict=True):
        # 10 m pixels from (300000, 5800000), north up.
        x0, y1 = 300000 + 10 * cols.start, 5800000 - 10 * rows.start
        x1, y0 = 300000 + 10 * cols.stop, 5800000 - 10 * rows.stop
        assert geom.bounds == (x0, y0, x1, y1)
        assert geom.area == pytest.approx(100 * (rows.stop - rows.start) * (cols.stop - cols.start))
    labels = scene_labels(df)
    for i, value in enumerate(sorted(v for v, _, _ in objects)[::-1], start=1):
        np.testing.assert_array_equal(labels == i, data[0] == value)


def test_bad_requests_name_the_problem(scene, tmp_path, stub):
    path, _ = scene([])
    with pytest.raises(ValueError, match="nothing to look for"):
        segment_scene(stub, path, progress=False)
    with pytest.raises(ValueError, match="tile_size"):
        segment_scene(stub, path, "x", tile_size=4, progress=False)
    with pytest.raises(ValueError, match="overlap"):
        segment_scene(stub, path, "x", tile_size=100, overlap=80, progress=False)
    with pytest.raises(TypeError, match="keywords must be a list"):
        segment_scene(stub, path, keywords="a,b", progress=False)
    with pytest.raises(FileNotFoundError):
        segment_scene(stub, tmp_path / "missing.tif", "x", progress=False)
    with pytest.raises(TypeError, match="progress"):
        segment_scene(stub, path, "x", progress="yes")


def test_progress_callable_sees_every_tile(scene, tmp_path, stub):
    path, _ = scene([(200, slice(30, 170), slice(40, 250))])
    seen = []
    df = segment_scene(
        stub, path, "x", tile_size=100, overlap=20, progress=lambda d, n: seen.append((d, n))
    )
    n = len(df.attrs["tiles"])
    assert seen == [(k, n) for k in range(1, n + 1)]
    assert set(df.attrs["timings"]) == {
        *("read", "stretch", "scene_stats", "model", "wait", "merge", "wall", "peak_in_flight")
    }

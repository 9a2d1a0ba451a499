"""Every output format on a real scene result: read back by independent readers with the scene's
CRS and every provenance attribute; the COG is a COG; COCO decodes with pycocotools."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pyogrio
import pyproj
import pytest
import rasterio
from rasterio.enums import Compression

from napari_sam3.core.formats import VECTOR_FORMATS
from napari_sam3.gis import vector as gis
from napari_sam3.gis.coco import to_coco, write_coco
from napari_sam3.scene import scene_geodataframe, scene_labels, write_scene

PROVENANCE = [
    "score",
    "keyword",
    "prompt_kind",
    "source",
    "model_id",
    "random_weights",
    "area_px",
    "area_m2",
    "tile",
]


@pytest.mark.timeout(1500)  # the first model test of a session pays the shared export
@pytest.mark.parametrize("suffix", list(VECTOR_FORMATS))
def test_vector_formats_read_back(tmp_path, suffix, scene_result, s2_scene_tif, local_client):
    path = write_scene(scene_result, tmp_path / f"out{suffix}", s2_scene_tif)
    expected = scene_geodataframe(scene_result, s2_scene_tif)
    scene_crs = pyproj.CRS.from_user_input(rasterio.open(s2_scene_tif).crs.to_wkt())
    if suffix == ".parquet":
        geo = json.loads(pq.read_metadata(path).metadata[b"geo"])
        crs = pyproj.CRS.from_json_dict(geo["columns"][geo["primary_column"]]["crs"])
        table = pq.read_table(path).to_pandas()
        columns = list(table.columns)
    else:
        info = pyogrio.read_info(path)
        crs = pyproj.CRS.from_user_input(info["crs"])
        columns = list(info["fields"])
        # FlatGeobuf's spatial index stores features in Hilbert order: compare by label_id
        table = pyogrio.read_dataframe(path, read_geometry=False).sort_values("label_id")
        assert info["features"] == len(expected)
    if suffix == ".geojson":
        assert crs.equals(pyproj.CRS.from_epsg(4326))
    else:
        assert crs.equals(scene_crs), (crs, scene_crs)
    names = [gis.SHAPEFILE_FIELDS.get(c, c) for c in PROVENANCE] if suffix == ".shp" else PROVENANCE
    missing = [c for c in names if c not in columns]
    assert not missing, (missing, columns)
    model_id = table[names[PROVENANCE.index("model_id")]]
    assert set(model_id) == {local_client.manifest.model_id}
    # 10 m pixels: every polygon's area is its pixel count times 100 m2
    area_px = table["area_px"].to_numpy(dtype=float)
    np.testing.assert_allclose(table["area_m2"].to_numpy(dtype=float), area_px * 100.0, rtol=1e-9)
    np.testing.assert_array_equal(table["tile"].to_numpy(), expected["tile"].to_numpy())
    assert set(table["source"]) == {s2_scene_tif.name}


def test_shapefile_refuses_to_overwrite_any_sidecar(tmp_path, scene_result, s2_scene_tif):
    target = tmp_path / "out.shp"
    (tmp_path / "out.dbf").write_bytes(b"analyst's table")
    with pytest.raises(FileExistsError, match="out.dbf"):
        write_scene(scene_result, target, s2_scene_tif)
    assert (tmp_path / "out.dbf").read_bytes() == b"analyst's table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.dbf"]


def test_cog_is_cloud_optimised_and_equals_the_labels(tmp_path, scene_result, s2_scene_tif):
    plain = write_scene(scene_result, tmp_path / "labels.tif", s2_scene_tif)
    cog = write_scene(scene_result, tmp_path / "labels_cog.tif", s2_scene_tif, cog=True)
    with rasterio.open(plain) as a, rasterio.open(cog) as b:
        assert b.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
        assert a.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") != "COG"
        assert b.block_shapes == [(512, 512)] and b.compression == Compression.deflate
        assert b.crs == a.crs and b.transform == a.transform and b.nodata == 0
        np.testing.assert_array_equal(a.read(1), b.read(1))
        expected = scene_labels(scene_result, a.shape)
        np.testing.assert_array_equal(b.read(1), expected)


def test_cog_has_overviews_on_a_larger_label_image(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.kron(rng.integers(0, 5, (40, 40)), np.ones((32, 32), np.int32)).astype(np.int32)
    profile = {
        "crs": "EPSG:32633",
        "transform": rasterio.Affine(10, 0, 3e5, 0, -10, 5.8e6),
        "height": labels.shape[0],
        "width": labels.shape[1],
    }
    path = gis.write_labels_geotiff(labels, tmp_path / "big.tif", profile, cog=True)
    with rasterio.open(path) as ds:
        assert ds.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
        assert ds.overviews(1), "a 1280 px COG should carry overviews"
        assert ds.block_shapes[0] == (512, 512)
        np.testing.assert_array_equal(ds.read(1), labels)


def test_coco_decodes_with_pycocotools(tmp_path, scene_result):
    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO

    path = write_coco(scene_result, tmp_path / "train.json")
    coco = COCO(str(path))
    assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == ["building"]
    (image,) = coco.loadImgs(coco.getImgIds())
    assert (image["height"], image["width"]) == (240, 300)
    anns = coco.loadAnns(coco.getAnnIds())
    assert len(anns) == len(scene_result)
    for ann, mask in zip(anns, scene_result["mask"], strict=True):
        dense = np.asarray(mask.to_dense(), bool)
        np.testing.assert_array_equal(coco.annToMask(ann).astype(bool), dense)
        assert ann["area"] == int(dense.sum())
        assert mask_utils.area(mask_utils.frPyObjects(ann["segmentation"], 240, 300)) == ann["area"]
        x, y, w, h = ann["bbox"]
        rows, cols = np.nonzero(dense)
        assert (x, y, w, h) == (cols.min(), rows.min(), np.ptp(cols) + 1, np.ptp(rows) + 1)


def test_coco_per_tile_entries(scene_result):
    from pycocotools import mask as mask_utils

    data = to_coco(scene_result, per_tile=True)
    tiles = {t.index: t for t in scene_result.attrs["tiles"]}
    assert len(data["images"]) == len(set(scene_result["tile"]))
    by_image = {im["id"]: im for im in data["images"]}
    for ann, (_, row) in zip(
        data["annotations"], scene_result.sort_values("tile", kind="stable").iterrows(), strict=True
    ):
        image = by_image[ann["image_id"]]
        r0, c0, r1, c1 = tiles[int(row["tile"])].bounds
        assert image["window"] == [r0, c0, r1, c1]
        rle = mask_utils.frPyObjects(ann["segmentation"], image["height"], image["width"])
        decoded = mask_utils.decode(rle).astype(bool)
        np.testing.assert_array_equal(decoded, np.asarray(row["mask"].to_dense())[r0:r1, c0:c1])


def test_cli_format_choices(tmp_path, tiny_repository, s2_scene_tif):
    from napari_sam3.cli import main

    out = tmp_path / "out"
    args = [
        "segment",
        str(s2_scene_tif),
        "--models",
        str(tiny_repository),
        "--precision",
        "fp32",
        "--prompt",
        "building",
        "--score-thr",
        "0",
        "--max-det",
        "2",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main([*args, "--format", "fgb"]) == 0
    assert main([*args, "--format", "cog"]) == 0
    fgb, tif = out / "s2_window.fgb", out / "s2_window.tif"
    assert pyogrio.read_info(fgb)["features"] > 0
    with rasterio.open(tif) as ds:
        assert ds.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
    table = pyogrio.read_dataframe(fgb, read_geometry=False)
    assert set(table["random_weights"]) == {True}


def test_coco_rle_of_a_crop_matches_pycocotools():
    """An asymmetric crop placed in a larger frame: pycocotools' own encoder agrees."""
    from pycocotools import mask as mask_utils

    from napari_sam3.gis.coco import coco_rle

    rng = np.random.default_rng(3)
    crop = rng.random((7, 5)) > 0.5
    crop[0, 0] = crop[-1, -1] = True
    frame = np.zeros((20, 30), bool)
    frame[4:11, 9:14] = crop
    ours = coco_rle(4, 9, crop, 20, 30)
    theirs = mask_utils.encode(np.asfortranarray(frame.astype(np.uint8)))
    assert mask_utils.frPyObjects(ours, 20, 30)["counts"] == theirs["counts"]
    np.testing.assert_array_equal(
        mask_utils.decode(mask_utils.frPyObjects(ours, 20, 30)).astype(bool), frame
    )
    assert coco_rle(0, 0, np.zeros((0, 0), bool), 20, 30)["counts"] == [600]

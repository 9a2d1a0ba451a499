"""The one scene driver (scene/driver.py): segment, add provenance, write atomically, and never
replace an input; the CLI's serial loop writes exactly what `segment_to_file` writes."""

from __future__ import annotations

import geopandas as gpd
import pandas as pd
import pytest

from napari_sam3.cli import main
from napari_sam3.prompts.query import PostProcess, Query
from napari_sam3.scene import SceneSettings, segment_to_file

QUERY = Query(keywords=["building", "water"], score_thr=0.0, max_det=5)


def _concept_file(local_client, crop_tif, path):
    from napari_sam3.imagery.raster import read_raster

    image = read_raster(crop_tif)
    return local_client.encode_exemplars(image, [[10, 10, 50, 60]], name="sheds").save(path)


def test_segment_to_file_writes_the_scene_with_provenance(local_client, crop_tif, tmp_path):
    settings = SceneSettings(tile_size=128)
    out = segment_to_file(local_client, crop_tif, tmp_path / "out.gpkg", QUERY, settings)
    assert out.output == tmp_path / "out.gpkg" and out.output.is_file()
    gdf = gpd.read_file(out.output)
    assert len(gdf) == len(out.frame) > 0
    assert set(gdf["keyword"]) <= {"building", "water"}
    assert set(gdf["model_id"]) == {local_client.model_id} and gdf["random_weights"].all()
    assert out.counts == gdf["keyword"].value_counts().to_dict()
    assert out.summary()["features"] == len(gdf) and out.summary()["tiles"] > 1
    # the query's post-processing shapes the polygons written
    floor = float(round(gdf["area_m2"].median()))
    post = QUERY.replace(postprocess=PostProcess(min_area_m2=floor))
    kept = segment_to_file(local_client, crop_tif, tmp_path / "big.gpkg", post, settings)
    big = gpd.read_file(kept.output)
    assert 0 < len(big) < len(gdf) and (big["area_m2"] >= floor).all()
    assert set(big["postprocess"]) == {f"min_area_m2={floor:g}"}


def test_the_cli_writes_what_the_driver_writes(local_client, tiny_repository, crop_tif, tmp_path):
    driver = segment_to_file(
        local_client, crop_tif, tmp_path / "driver.gpkg", QUERY, SceneSettings(tile_size=128)
    )
    argv = ["segment", crop_tif, "--models", tiny_repository, "--precision", "fp32",
            "--keywords", "building;water", "--score-thr", "0", "--max-det", "5",
            "--tile-size", "128", "--out", tmp_path / "cli.gpkg", "--quiet"]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    a, b = gpd.read_file(tmp_path / "cli.gpkg"), gpd.read_file(driver.output)
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    pd.testing.assert_frame_equal(
        pd.DataFrame(a.drop(columns="geometry")), pd.DataFrame(b.drop(columns="geometry"))
    )
    assert a.geometry.to_wkb().tolist() == b.geometry.to_wkb().tolist()


def test_no_output_replaces_an_input(local_client, crop_tif, tmp_path):
    concept = _concept_file(local_client, crop_tif, tmp_path / "sheds.npz")
    before = concept.read_bytes()
    query = QUERY.replace(concepts=[concept])
    for target in (concept, crop_tif):
        with pytest.raises(FileExistsError) as info:
            segment_to_file(local_client, crop_tif, target, query)
        assert "input" in str(info.value)
    assert concept.read_bytes() == before
    # an output that exists is kept unless overwrite is asked for
    target = tmp_path / "out.geojson"
    target.write_text("{}")
    with pytest.raises(FileExistsError, match="overwrite"):
        segment_to_file(local_client, crop_tif, target, QUERY)
    assert target.read_text() == "{}"
    done = segment_to_file(local_client, crop_tif, target, QUERY, overwrite=True)
    assert len(gpd.read_file(done.output)) == len(done.frame)


def test_a_failed_scene_writes_nothing(local_client, crop_tif, tmp_path):
    settings = SceneSettings(bands=[7])  # the crop has 3 bands
    with pytest.raises(ValueError, match="band"):
        segment_to_file(local_client, crop_tif, tmp_path / "out.gpkg", QUERY, settings)
    assert not list(tmp_path.iterdir())

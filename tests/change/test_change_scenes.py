"""`napari-sam3 change` end to end with the tiny model on dates made from the Sentinel-2 sample.

The random-weight model's masks are meaningless, so these tests assert what holds whatever the
masks are: the same pixels on another grid give no change; pixels painted as fill give
`unknown` around them, never `gone`; bad inputs are refused with nothing written.
"""

from __future__ import annotations

import contextlib
import io

import geopandas as gpd
import numpy as np
import pyogrio
import pytest
import rasterio
import shapely
from rasterio.transform import Affine

from napari_sam3.change import change_to_file
from napari_sam3.cli import main
from napari_sam3.core.columns import CHANGE_COLUMNS, HISTORY_COLUMNS
from napari_sam3.core.errors import InvalidInput
from napari_sam3.prompts.query import Query
from napari_sam3.scene.settings import SceneSettings

from .._rasters import PAINTED, later_date, write_geotiff


@pytest.fixture(scope="module")
def scenes(s2_crop, tmp_path_factory):
    """d1: the crop; d2: the same pixels cut by 20 rows and 30 columns, on a grid whose origin
    moved with them; d3: d2 with a block painted as nodata."""
    folder = tmp_path_factory.mktemp("change")
    data, t = s2_crop.data, s2_crop.transform
    d3, shifted = later_date(folder, s2_crop, "d3.tif")
    cut = np.ascontiguousarray(data[:, 20:, 30:])
    return {
        "folder": folder,
        "d1": write_geotiff(folder / "d1.tif", data, t, s2_crop.crs),
        "d2": write_geotiff(folder / "d2.tif", cut, shifted, s2_crop.crs),
        "d3": d3,
        "painted": shapely.box(
            *rasterio.transform.array_bounds(
                PAINTED[0].stop - PAINTED[0].start,
                PAINTED[1].stop - PAINTED[1].start,
                shifted * Affine.translation(PAINTED[1].start, PAINTED[0].start),
            )
        ),
        "crs": s2_crop.crs,
    }


@pytest.fixture(scope="module")
def run(scenes, tiny_repository):
    """The command run once on the three dates."""
    out = scenes["folder"] / "changes.gpkg"
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        code = main(
            [
                "change", str(scenes["d1"]), str(scenes["d2"]), str(scenes["d3"]),
                "--dates", "d1", "d2", "d3", "--keywords", "building,field", "--score-thr", "0",
                "--models", str(tiny_repository), "--out", str(out), "--tile-size", "64",
                "--quiet",
            ]
        )  # fmt: skip
    return code, out, said.getvalue()


def test_one_layer_is_written_with_both_dates_provenance(run):
    code, out, _ = run
    assert code == 0
    assert [name for name, _ in pyogrio.list_layers(out)] == ["changes"]
    table = gpd.read_file(out)
    for column in [*CHANGE_COLUMNS, *HISTORY_COLUMNS, "model_id", "random_weights", "before_wkt"]:
        assert column in table.columns
    assert len(table) > 0
    assert set(table["before_source"]) <= {"d1.tif", "d2.tif", ""}
    assert set(table["after_source"]) <= {"d2.tif", "d3.tif", ""}
    assert table["random_weights"].all()


def test_the_same_pixels_on_another_grid_give_no_change(run):
    _, out, said = run
    table = gpd.read_file(out)
    first = table[table["step"] == 1]
    assert set(first["change"]) <= {"same", "unknown"}
    assert (first["change"] == "same").any()
    matched = first[first["change"] == "same"]
    assert (matched["iou"] == 1.0).all()  # the very same objects, in the very same place
    earlier = gpd.GeoSeries.from_wkt(matched["before_wkt"], crs=table.crs)
    assert earlier.geom_equals_exact(
        matched.geometry.reset_index(drop=True).set_axis(earlier.index), 0.01
    ).all()
    lines = [line for line in said.splitlines() if "d1 -> d2:" in line]
    assert lines and all("0 new (0 m²), 0 gone (0 m²), 0 changed (0 m²)" in line for line in lines)


def test_fill_gives_unknown_never_gone(run, scenes):
    _, out, _ = run
    table = gpd.read_file(out)
    second = table[table["step"] == 2]
    earlier = gpd.GeoSeries.from_wkt(second["before_wkt"].replace("", None), crs=table.crs)
    later = second.geometry
    on_fill = (
        earlier.intersects(scenes["painted"]).to_numpy()
        | later.intersects(scenes["painted"]).to_numpy()
    )
    assert on_fill.any()
    assert (second["change"][on_fill] == "unknown").all()
    assert set(second["reason"][on_fill]) <= {"fill", "edge"}
    assert (second["reason"] == "fill").any()


def test_each_object_has_a_history(run):
    _, out, _ = run
    table = gpd.read_file(out)
    for _, row in table.iterrows():
        steps = row["history"].split(">")
        assert len(steps) == 2
        assert row["change"] in steps[row["step"] - 1].split("/")
    # a row of step 1 whose after objects are a row of step 2's before objects: one track
    first, second = table[table["step"] == 1], table[table["step"] == 2]
    ends = {
        (k, i): t
        for k, ids, t in zip(first["keyword"], first["after_ids"], first["track"], strict=True)
        for i in ids.split(",")
        if i
    }
    for k, ids, t in zip(second["keyword"], second["before_ids"], second["track"], strict=True):
        for i in filter(None, ids.split(",")):
            assert ends.get((k, i), t) == t


# -- refusals: nothing is written -------------------------------------------------------------


@pytest.fixture(scope="module")
def query():
    return Query.of(prompt="building", score_thr=0.0)


def test_scenes_that_do_not_overlap_are_refused(scenes, s2_crop, local_client, query, tmp_path):
    far = write_geotiff(
        tmp_path / "far.tif",
        s2_crop.data,
        s2_crop.transform * Affine.translation(5000, 0),
        s2_crop.crs,
    )
    out = tmp_path / "out.gpkg"
    with pytest.raises(InvalidInput, match="does not overlap"):
        change_to_file(local_client, [scenes["d1"], far], out, query, SceneSettings(tile_size=64))
    assert not out.exists()


def test_a_scene_that_cannot_be_placed_is_refused(scenes, s2_crop, local_client, query, tmp_path):
    mars = write_geotiff(
        tmp_path / "mars.tif", s2_crop.data, Affine(0.001, 0, 10, 0, -0.001, 20), "IAU_2015:49900"
    )
    out = tmp_path / "out.gpkg"
    with pytest.raises(InvalidInput, match="cannot be placed"):
        change_to_file(local_client, [scenes["d1"], mars], out, query, SceneSettings(tile_size=64))
    assert not out.exists()


def test_a_date_all_fill_is_refused(scenes, s2_crop, local_client, query, tmp_path):
    empty = write_geotiff(
        tmp_path / "empty.tif",
        np.zeros_like(s2_crop.data),
        s2_crop.transform,
        s2_crop.crs,
        nodata=0,
    )
    out = tmp_path / "out.gpkg"
    with pytest.raises(InvalidInput, match="empty.tif has no valid pixel where the dates overlap"):
        change_to_file(local_client, [scenes["d1"], empty], out, query, SceneSettings(tile_size=64))
    assert not out.exists()


def test_the_command_refuses_with_exit_2(scenes, tiny_repository, tmp_path, capsys):
    out = tmp_path / "out.gpkg"
    args = ["change", str(scenes["d1"]), "--prompt", "building", "--models", str(tiny_repository)]
    assert main([*args, "--out", str(out)]) == 2  # one scene
    assert "two scenes or more" in capsys.readouterr().err
    args.insert(2, str(scenes["d2"]))
    assert main([*args, "--out", str(tmp_path / "out.shp")]) == 2
    assert "Shapefile" in capsys.readouterr().err
    assert main([*args, "--out", str(scenes["d2"])]) == 2
    assert "is the input raster" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--dates", "a"]) == 2
    assert not out.exists()

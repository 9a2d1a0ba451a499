"""Every algorithm through `processing.run` in a QgsApplication (QGIS's own Python), the way
models, batch runs and the Python console call them; cancel through a feedback object."""

from __future__ import annotations

import json
import re

import geopandas as gpd
import pytest

from napari_sam3.prompts.concept import Concept

from .conftest import QGIS_PYTHON, processing_run
from .test_qgis_process import PROVENANCE, exemplar_file, pixel_box


@pytest.fixture(scope="module")
def runs(qgis_env, profile, s2_tif, s2_folder, tiny_repository, tmp_path_factory):
    """All five algorithms in one QgsApplication, outputs in formats other than GeoPackage."""
    tmp = tmp_path_factory.mktemp("processing_run")
    model = {"MODELS": str(tiny_repository), "SCORE_THR": 0, "MAX_DET": 4}
    exemplars = exemplar_file(
        tmp / "trees.gpkg", [pixel_box(5, 5, 30, 30), pixel_box(50, 40, 90, 80)], [1, 0]
    )
    out = {
        "text": tmp / "text.geojson",
        "exemplars": tmp / "exemplars.fgb",
        "concept": tmp / "trees.npz",
        "applied": tmp / "applied.gpkg",
        "folder": tmp / "folder",
    }
    raster = {"INPUT": str(s2_tif)}
    steps = [
        ("segment_text", {**raster, "KEYWORDS": "building; road", "OUTPUT": out["text"]}),
        ("segment_exemplars", {**raster, "EXEMPLARS": exemplars, "EXEMPLAR_FIELD": "positive",
                               "OUTPUT": out["exemplars"]}),
        ("encode_concept", {**raster, "EXEMPLARS": exemplars, "EXEMPLAR_FIELD": "positive",
                            "OUTPUT": out["concept"]}),
        ("apply_concept", {**raster, "CONCEPTS": [out["concept"]], "OUTPUT": out["applied"]}),
        ("segment_folder", {"INPUT_FOLDER": s2_folder, "KEYWORDS": "water", "FORMAT": 4,
                            "OUTPUT_FOLDER": out["folder"]}),
    ]  # fmt: skip
    spec = [
        {"algorithm": f"napari_sam3:{name}", "parameters": _plain({**params, **model})}
        for name, params in steps
    ]
    done = processing_run(qgis_env, profile, spec, tmp)
    return {name: result for (name, _), result in zip(steps, done, strict=True)}, out


def _plain(parameters: dict) -> dict:
    """Paths as text (JSON for the driver); numbers stay numbers."""
    return {
        k: [str(i) for i in v]
        if isinstance(v, list)
        else v
        if isinstance(v, int | float)
        else str(v)
        for k, v in parameters.items()
    }


def _layer(path, model_id):
    gdf = gpd.read_file(path)
    assert gdf.crs.to_epsg() == 32633
    assert PROVENANCE <= set(gdf.columns)
    assert len(gdf) and set(gdf["model_id"]) == {model_id}
    return gdf


def test_segment_text_writes_any_format_qgis_writes(runs, local_client):
    done, out = runs
    assert done["segment_text"]["ok"], done["segment_text"]
    assert done["segment_text"]["results"]["OUTPUT"] == str(out["text"])
    gdf = _layer(out["text"], local_client.model_id)  # GeoJSON
    assert set(gdf["keyword"]) == {"building", "road"}
    assert max(done["segment_text"]["progress"]) == 100  # per-tile progress reached the end


def test_segment_exemplars(runs, local_client):
    done, out = runs
    assert done["segment_exemplars"]["ok"], done["segment_exemplars"]
    gdf = _layer(out["exemplars"], local_client.model_id)  # FlatGeobuf
    assert set(gdf["keyword"]) == {"trees"}


def test_encode_and_apply_concept(runs, local_client):
    done, out = runs
    assert done["encode_concept"]["ok"], done["encode_concept"]
    concept = Concept.load(out["concept"], local_client.manifest)
    assert (concept.n_positive, concept.n_negative) == (1, 1)
    assert done["apply_concept"]["ok"], done["apply_concept"]
    assert set(_layer(out["applied"], local_client.model_id)["keyword"]) == {"trees"}


def test_segment_folder(runs, local_client):
    done, out = runs
    assert done["segment_folder"]["ok"], done["segment_folder"]
    assert done["segment_folder"]["results"]["DONE"] == "2"
    for name in ("north", "south"):
        gdf = _layer(out["folder"] / f"{name}.fgb", local_client.model_id)
        assert set(gdf["source"]) == {f"{name}.tif"}


def test_cancel_stops_between_tiles_and_leaves_no_output(
    qgis_env, profile, s2_tif, s2_folder, tiny_repository, tmp_path
):
    out = tmp_path / "cancelled.gpkg"
    folder = tmp_path / "folder"
    model = {"MODELS": str(tiny_repository), "SCORE_THR": 0}
    text, batch = processing_run(
        qgis_env,
        profile,
        [
            {
                "algorithm": "napari_sam3:segment_text",
                "parameters": {
                    "INPUT": str(s2_tif),
                    "KEYWORDS": "building",
                    "OUTPUT": str(out),
                    **model,
                },
                "cancel_at": 1,  # the first tile's progress
            },
            {
                "algorithm": "napari_sam3:segment_folder",
                "parameters": {
                    "INPUT_FOLDER": str(s2_folder),
                    "KEYWORDS": "building",
                    "OUTPUT_FOLDER": str(folder),
                    **model,
                },
                "cancel_at": 1,
            },
        ],  # fmt: skip
        tmp_path,
    )
    assert text["canceled"] and not text["ok"]
    assert text["error"].startswith("Cancelled (s2.tif: after tile ")
    stopped, total = map(int, re.search(r"after tile (\d+) of (\d+)", text["error"]).groups())
    assert 1 <= stopped < total == 15  # it stopped early, at a tile boundary
    assert max(text["progress"]) < 100
    assert not out.exists()

    assert batch["canceled"] and not batch["ok"]
    assert batch["error"].startswith("Cancelled (north.tif: after tile ")
    assert sorted(p.name for p in folder.iterdir()) in ([], ["napari-sam3-journal.json"])
    if (folder / "napari-sam3-journal.json").exists():
        assert json.loads((folder / "napari-sam3-journal.json").read_text())["scenes"] == {}


def test_bad_input_is_a_processing_exception_with_the_library_message(
    qgis_env, profile, s2_tif, tiny_repository, tmp_path
):
    out = tmp_path / "never.gpkg"
    base = {"INPUT": str(s2_tif), "KEYWORDS": "building", "OUTPUT": str(out)}
    empty = tmp_path / "empty.gpkg"
    down, outside, no_python, bare_python, nothing = processing_run(
        qgis_env,
        profile,
        [
            {
                "algorithm": "napari_sam3:segment_text",
                "parameters": {**base, "SERVER": "127.0.0.1:1", "CONNECT_TIMEOUT": 1},
            },
            {
                "algorithm": "napari_sam3:segment_text",
                "parameters": {
                    **base,
                    "MODELS": str(tiny_repository),
                    "EXTENT": "0,1,0,1 [EPSG:32633]",
                },
            },
            {
                "algorithm": "napari_sam3:segment_text",
                "parameters": {**base, "MODELS": str(tiny_repository)},
                "settings": {"Processing/Configuration/NAPARI_SAM3_PYTHON": str(tmp_path / "no")},
            },
            {  # QGIS's own Python has no napari_sam3
                "algorithm": "napari_sam3:segment_text",
                "parameters": {**base, "MODELS": str(tiny_repository)},
                "settings": {"Processing/Configuration/NAPARI_SAM3_PYTHON": QGIS_PYTHON},
            },
            {  # not an error: nothing found is an empty layer with every field
                "algorithm": "napari_sam3:segment_text",
                "parameters": {
                    **base,
                    "MODELS": str(tiny_repository),
                    "SCORE_THR": 1.0,
                    "OUTPUT": str(empty),
                },
            },
        ],  # fmt: skip
        tmp_path,
    )
    assert not down["ok"] and "no ready Triton server at 127.0.0.1:1" in down["error"]
    assert not outside["ok"] and "does not overlap the raster s2.tif" in outside["error"]
    assert not no_python["ok"]
    assert f"napari-sam3's Python was not found at {tmp_path / 'no'}" in no_python["error"]
    assert not out.exists()
    assert not bare_python["ok"]
    assert f"{QGIS_PYTHON} cannot import napari_sam3" in bare_python["error"]
    assert nothing["ok"], nothing
    gdf = gpd.read_file(empty)
    assert len(gdf) == 0 and PROVENANCE <= set(gdf.columns) and gdf.crs.to_epsg() == 32633

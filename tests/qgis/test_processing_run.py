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

PYTHON_SETTING = "Processing/Configuration/NAPARI_SAM3_PYTHON"


@pytest.fixture(scope="module")
def runs(qgis_env, profile, s2_tif, s2_folder, tiny_repository, tmp_path_factory):
    """Every run of this module in one QgsApplication (one driver, one QGIS start): the five
    algorithms writing formats other than GeoPackage, two runs cancelled through their feedback,
    four refused runs and one that finds nothing. The driver's answers by name, and the paths."""
    tmp = tmp_path_factory.mktemp("processing_run")
    # the suite's precision (tests/conftest.py SUITE_PRECISION): one compiled model for all runs
    model = {"MODELS": str(tiny_repository), "PRECISION": "fp32", "SCORE_THR": 0}
    exemplars = exemplar_file(
        tmp / "trees.gpkg", [pixel_box(5, 5, 30, 30), pixel_box(50, 40, 90, 80)], [1, 0]
    )
    out = {
        "text": tmp / "text.geojson",
        "exemplars": tmp / "exemplars.fgb",
        "concept": tmp / "trees.npz",
        "applied": tmp / "applied.gpkg",
        "folder": tmp / "folder",
        "cancelled": tmp / "cancelled.gpkg",
        "cancelled folder": tmp / "cancelled_folder",
        "never": tmp / "never.gpkg",
        "empty": tmp / "empty.gpkg",
        "no python": tmp / "no",
        "remembered": tmp / "remembered.gpkg",
    }
    raster = {"INPUT": str(s2_tif)}
    written = {**model, "MAX_DET": 4}
    refused = {**raster, "KEYWORDS": "building", "OUTPUT": out["never"]}
    steps = [  # name, algorithm, parameters, the driver's options
        ("segment_text", "segment_text",
         {**raster, "KEYWORDS": "building; road", "OUTPUT": out["text"], **written}, {}),
        ("segment_exemplars", "segment_exemplars",
         {**raster, "EXEMPLARS": exemplars, "EXEMPLAR_FIELD": "positive",
          "OUTPUT": out["exemplars"], **written}, {}),
        ("encode_concept", "encode_concept",
         {**raster, "EXEMPLARS": exemplars, "EXEMPLAR_FIELD": "positive",
          "OUTPUT": out["concept"], **written}, {}),
        ("apply_concept", "apply_concept",
         {**raster, "CONCEPTS": [out["concept"]], "OUTPUT": out["applied"], **written}, {}),
        ("segment_folder", "segment_folder",
         {"INPUT_FOLDER": s2_folder, "KEYWORDS": "water", "FORMAT": 4,
          "OUTPUT_FOLDER": out["folder"], **written}, {}),
        # cancelled once the first tile's progress is reported
        ("cancelled text", "segment_text",
         {**raster, "KEYWORDS": "building", "OUTPUT": out["cancelled"], **model},
         {"cancel_at": 1}),
        ("cancelled folder", "segment_folder",
         {"INPUT_FOLDER": s2_folder, "KEYWORDS": "building",
          "OUTPUT_FOLDER": out["cancelled folder"], **model}, {"cancel_at": 1}),
        ("server down", "segment_text",
         {**refused, "SERVER": "127.0.0.1:1", "CONNECT_TIMEOUT": 1}, {}),
        ("extent outside", "segment_text",
         {**refused, **model, "EXTENT": "0,1,0,1 [EPSG:32633]"}, {}),
        ("no python", "segment_text",
         {**refused, **model}, {"settings": {PYTHON_SETTING: str(out["no python"])}}),
        ("bare python", "segment_text",  # QGIS's own Python has no napari_sam3
         {**refused, **model}, {"settings": {PYTHON_SETTING: QGIS_PYTHON}}),
        # no MODELS or SERVER: the model line the dock (or the last run) left is the default
        ("remembered line", "segment_text",
         {**raster, "KEYWORDS": "building", "OUTPUT": out["remembered"], "PRECISION": "fp32",
          "SCORE_THR": 0, "MAX_DET": 4},
         {"settings": {"napari-sam3/connection": str(tiny_repository)}}),
        ("nothing found", "segment_text",  # not an error: an empty layer with every field
         {**raster, "KEYWORDS": "building", "OUTPUT": out["empty"], **model, "SCORE_THR": 1.0},
         {}),
    ]  # fmt: skip
    spec = [
        {"algorithm": f"napari_sam3:{algorithm}", "parameters": _plain(parameters), **options}
        for _, algorithm, parameters, options in steps
    ]
    done = processing_run(qgis_env, profile, spec, tmp)
    return {name: result for (name, *_), result in zip(steps, done, strict=True)}, out


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


def test_cancel_stops_between_tiles_and_leaves_no_output(runs):
    done, out = runs
    text, batch = done["cancelled text"], done["cancelled folder"]
    assert text["canceled"] and not text["ok"]
    assert text["error"].startswith("Cancelled (s2.tif: after tile ")
    stopped, total = map(int, re.search(r"after tile (\d+) of (\d+)", text["error"]).groups())
    assert 1 <= stopped < total == 15  # it stopped early, at a tile boundary
    assert max(text["progress"]) < 100
    assert not out["cancelled"].exists()

    folder = out["cancelled folder"]
    assert batch["canceled"] and not batch["ok"]
    assert batch["error"].startswith("Cancelled (north.tif: after tile ")
    # no output; the folder journal, and the stopped scene's tile journal (RESUME goes on from it)
    left = {p.name for p in folder.iterdir()}
    assert left <= {"napari-sam3-journal.json", "north.gpkg.napari-sam3-partial"}
    if (folder / "napari-sam3-journal.json").exists():
        assert json.loads((folder / "napari-sam3-journal.json").read_text())["scenes"] == {}


def test_bad_input_is_a_processing_exception_with_the_library_message(runs):
    done, out = runs
    down, outside = done["server down"], done["extent outside"]
    no_python, bare_python, nothing = done["no python"], done["bare python"], done["nothing found"]
    assert not down["ok"] and "no ready Triton server at 127.0.0.1:1" in down["error"]
    assert not outside["ok"] and "does not overlap the raster s2.tif" in outside["error"]
    assert not no_python["ok"]
    assert f"napari-sam3's Python was not found at {out['no python']}" in no_python["error"]
    assert not out["never"].exists()
    assert not bare_python["ok"]
    assert f"{QGIS_PYTHON} cannot import napari_sam3" in bare_python["error"]
    assert nothing["ok"], nothing
    gdf = gpd.read_file(out["empty"])
    assert len(gdf) == 0 and PROVENANCE <= set(gdf.columns) and gdf.crs.to_epsg() == 32633


def test_the_model_line_is_shared_with_the_dock_and_the_last_run(runs, tiny_repository):
    """One model line (runner.CONNECTION_KEY): the dock's, and the algorithms' default; a run
    given MODELS or SERVER leaves it for the next dialog, and a default never competes with
    the other one given (the server-down run above has SERVER alone and reaches the server)."""
    done, out = runs
    assert done["segment_text"]["defaults"] == {"MODELS": str(tiny_repository), "SERVER": None}
    assert done["server down"]["defaults"] == {"MODELS": None, "SERVER": "127.0.0.1:1"}
    remembered = done["remembered line"]
    assert remembered["ok"], remembered
    assert gpd.read_file(out["remembered"])["model_id"].nunique() == 1

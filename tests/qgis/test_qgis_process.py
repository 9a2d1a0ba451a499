"""Every algorithm through `qgis_process`, as an analyst runs it after install_qgis_plugin.sh,
with the tiny model; outputs read back with geopandas. Bad input exits non-zero with the
library's message and writes nothing."""

from __future__ import annotations

import json
import socket

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from shapely.geometry import box

from napari_sam3 import Sam3Client
from napari_sam3.cli import main
from napari_sam3.gis.post import PostProcess, postprocess
from napari_sam3.prompts.concept import Concept
from napari_sam3.scene import scene_geodataframe, segment_scene

from .conftest import qgis_process, results

PROVENANCE = {"score", "keyword", "prompt_kind", "source", "model_id", "random_weights", "area_m2"}
# The s2.tif crop: origin (332000, 5821040), 10 m pixels, 420 x 300, EPSG:32633.
X0, Y0 = 332000.0, 5821040.0


def pixel_box(c0, r0, c1, r1):
    """A polygon over raster pixels (columns c0..c1, rows r0..r1) in EPSG:32633."""
    return box(X0 + 10 * c0, Y0 - 10 * r1, X0 + 10 * c1, Y0 - 10 * r0)


def exemplar_file(path, boxes, labels, crs="EPSG:4326", layer_crs="EPSG:32633"):
    """Exemplar polygons in `crs` (reprojected from the raster's) with a `positive` field."""
    gdf = gpd.GeoDataFrame({"positive": labels}, geometry=boxes, crs=layer_crs)
    gdf = gdf.to_crs(crs) if crs else gdf.set_crs(None, allow_override=True)
    gdf.to_file(path)
    return path


def check_layer(path, model_id, source="s2.tif"):
    gdf = gpd.read_file(path)
    assert gdf.crs.to_epsg() == 32633
    assert PROVENANCE <= set(gdf.columns)
    assert len(gdf) > 0
    assert set(gdf["source"]) == {source}
    assert set(gdf["model_id"]) == {model_id}
    assert gdf["random_weights"].all()  # the tiny model has random weights, and says so
    # areas are of the polygons themselves, in m² (a projected CRS in metres)
    np.testing.assert_allclose(gdf["area_m2"], gdf.geometry.area, rtol=1e-6)
    return gdf


# OSGeo4W and QGIS.app point GDAL_DATA / PROJ_LIB at QGIS's own (older) data; the library's
# wheels must keep theirs (with PROJ's older proj.db, their CRS lookups fail).
QGIS_OWN_DATA = {"GDAL_DATA": "/usr/share/gdal", "PROJ_LIB": "/usr/share/proj",
                 "PROJ_DATA": "/usr/share/proj"}  # fmt: skip
MEMORY_GIB = 0.5


@pytest.fixture(scope="module")
def text_run(qgis_env, s2_tif, tiny_repository, tmp_path_factory):
    """One segment_text run that three tests read: verbose (the worker's own log shown), with
    QGIS's own GDAL and PROJ data in its environment and a memory budget."""
    out = tmp_path_factory.mktemp("segment_text") / "out.gpkg"
    done = qgis_process(
        {**qgis_env, **QGIS_OWN_DATA},
        "napari_sam3:segment_text",
        verbose=True,
        INPUT=s2_tif,
        KEYWORDS="building,water",
        MODELS=tiny_repository,
        PRECISION="fp32",  # local_client's
        SCORE_THR=0,
        MAX_DET=5,
        MEMORY_GIB=MEMORY_GIB,
        OUTPUT=out,
    )
    return done, out


def test_segment_text_is_the_cli_run_with_provenance_in_the_raster_crs(
    text_run, s2_tif, tiny_repository, local_client
):
    done, out = text_run
    assert results(done)["OUTPUT"] == str(out)
    gdf = check_layer(out, local_client.model_id)
    assert set(gdf["keyword"]) == {"building", "water"}
    assert set(gdf["prompt_kind"]) == {"text"}
    left, bottom, right, top = X0, Y0 - 3000, X0 + 4200, Y0
    x1, y1, x2, y2 = gdf.total_bounds
    assert left <= x1 and x2 <= right and bottom <= y1 and y2 <= top
    # the same file as the CLI's: one scene driver (scene/driver.py), no logic of the provider's
    cli_out = out.with_name("cli.gpkg")
    argv = ["segment", s2_tif, "--models", tiny_repository, "--precision", "fp32", "--keywords",
            "building;water", "--score-thr", "0", "--max-det", "5", "--memory-budget",
            f"{int(MEMORY_GIB * 1024)}MiB", "--out", cli_out, "--quiet"]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    # QGIS's sink keeps the objects, not their order (both by label id), nor the float32 subtype
    # of a field (the values, widened exactly to float64, are compared)
    cli = gpd.read_file(cli_out).sort_values("label_id", ignore_index=True)
    gdf = gdf.sort_values("label_id", ignore_index=True)
    assert list(cli.columns) == list(gdf.columns) and len(cli) == len(gdf)
    pd.testing.assert_frame_equal(
        pd.DataFrame(cli.drop(columns="geometry")),
        pd.DataFrame(gdf.drop(columns="geometry")),
        check_dtype=False,
        check_exact=True,
    )
    assert cli.geometry.to_wkb().tolist() == gdf.geometry.to_wkb().tolist()


def test_memory_budget_is_the_library_s_and_said(text_run):
    done, out = text_run
    results(done)
    assert "memory budget 512.00 MiB: " in done.stdout + done.stderr
    assert out.is_file()


def test_qgis_own_gdal_and_proj_data_do_not_reach_the_worker(text_run, local_client):
    done, out = text_run
    results(done)
    assert "worker.py" in done.stdout + done.stderr  # the worker's own log is shown
    assert "It comes from another PROJ installation" not in done.stdout + done.stderr
    check_layer(out, local_client.model_id)


def test_bands_and_min_area_are_the_library_s(
    qgis_env, s2_tif, tiny_repository, local_client, tmp_path
):
    out = tmp_path / "out.gpkg"
    done = qgis_process(
        qgis_env, "napari_sam3:segment_text", INPUT=s2_tif, KEYWORDS="field", BANDS=3,
        MIN_AREA_M2=100000, MODELS=tiny_repository, PRECISION="fp32", SCORE_THR=0, OUTPUT=out,
    )  # fmt: skip
    results(done)
    gdf = check_layer(out, local_client.model_id)
    assert gdf["area_m2"].min() >= 100000
    df = segment_scene(
        local_client, s2_tif, keywords=["field"], bands=[3], score_thr=0, progress=False
    )
    expected = postprocess(scene_geodataframe(df), PostProcess(min_area_m2=100000))
    assert 0 < len(expected) < len(df)  # the filter dropped some: a real test of it
    assert len(gdf) == len(expected)
    np.testing.assert_allclose(np.sort(gdf["score"]), np.sort(expected["score"]), rtol=1e-5)


def test_a_triton_server_runs_it_as_the_library_does(
    qgis_env, s2_tif, triton_server, local_client, tmp_path
):
    out = tmp_path / "out.gpkg"
    done = qgis_process(
        qgis_env, "napari_sam3:segment_text", INPUT=s2_tif, KEYWORDS="water",
        SERVER=triton_server.grpc_address, CONNECT_TIMEOUT=30, SCORE_THR=0, MAX_DET=3,
        OUTPUT=out,
    )  # fmt: skip
    results(done)
    gdf = check_layer(out, local_client.model_id)
    with Sam3Client(triton_server.grpc_address, connect_timeout=30) as client:
        df = segment_scene(client, s2_tif, keywords=["water"], score_thr=0, max_det=3,
                           progress=False)  # fmt: skip
    assert len(gdf) == len(df)
    np.testing.assert_allclose(np.sort(gdf["score"]), np.sort(df["score"]), rtol=1e-5)


def test_extent_limits_the_run_to_the_pixels_inside_it(
    qgis_env, s2_tif, tiny_repository, local_client, tmp_path
):
    out = tmp_path / "out.gpkg"
    window = (332500.0, 333500.0, 5820000.0, 5820800.0)  # xmin, xmax, ymin, ymax
    done = qgis_process(
        qgis_env, "napari_sam3:segment_text", INPUT=s2_tif, KEYWORDS="building",
        EXTENT=",".join(map(str, window)) + " [EPSG:32633]", MODELS=tiny_repository,
        PRECISION="fp32", SCORE_THR=0, OUTPUT=out,
    )  # fmt: skip
    results(done)
    gdf = check_layer(out, local_client.model_id)  # the source is still the raster's name
    x1, y1, x2, y2 = gdf.total_bounds
    assert window[0] <= x1 and x2 <= window[1] and window[2] <= y1 and y2 <= window[3]


def test_segment_exemplars_takes_a_layer_in_another_crs_with_negatives(
    qgis_env, s2_tif, tiny_repository, local_client, tmp_path
):
    exemplars = exemplar_file(
        tmp_path / "roofs.gpkg", [pixel_box(10, 10, 40, 40), pixel_box(200, 150, 230, 170)], [1, 0]
    )
    out = tmp_path / "out.gpkg"
    done = qgis_process(
        qgis_env,
        "napari_sam3:segment_exemplars",
        INPUT=s2_tif,
        EXEMPLARS=exemplars,
        EXEMPLAR_FIELD="positive",
        KEYWORDS="water",
        MODELS=tiny_repository,
        PRECISION="fp32",
        SCORE_THR=0,
        OUTPUT=out,
    )
    results(done)
    gdf = check_layer(out, local_client.model_id)
    assert set(gdf["keyword"]) == {"roofs", "water"}  # the layer's name, and the keyword
    assert set(gdf.loc[gdf["keyword"] == "roofs", "prompt_kind"]) == {"concept"}


def test_encode_concept_then_apply_it(qgis_env, s2_tif, tiny_repository, local_client, tmp_path):
    exemplars = exemplar_file(
        tmp_path / "fields.gpkg", [pixel_box(5, 5, 30, 30), pixel_box(50, 40, 90, 80)], [1, 1]
    )
    concept = tmp_path / "fields.npz"
    done = qgis_process(
        qgis_env,
        "napari_sam3:encode_concept",
        INPUT=s2_tif,
        EXEMPLARS=exemplars,
        MODELS=tiny_repository,
        PRECISION="fp32",
        OUTPUT=concept,
    )
    assert results(done)["OUTPUT"] == str(concept)
    loaded = Concept.load(concept, local_client.manifest)
    assert (loaded.n_positive, loaded.n_negative, loaded.name) == (2, 0, "fields")

    out = tmp_path / "applied.gpkg"
    done = qgis_process(
        qgis_env,
        "napari_sam3:apply_concept",
        INPUT=s2_tif,
        CONCEPTS=[concept],
        MODELS=tiny_repository,
        PRECISION="fp32",
        SCORE_THR=0,
        OUTPUT=out,
    )
    results(done)
    gdf = check_layer(out, local_client.model_id)
    assert set(gdf["keyword"]) == {"fields"}


def test_segment_folder_writes_one_output_per_raster_and_resumes(
    qgis_env, s2_folder, tiny_repository, local_client, tmp_path
):
    out = tmp_path / "outputs"
    args = dict(
        INPUT_FOLDER=s2_folder,
        KEYWORDS="building",
        MODELS=tiny_repository,
        PRECISION="fp32",
        SCORE_THR=0,
        MAX_DET=3,
        OUTPUT_FOLDER=out,
    )
    first = results(qgis_process(qgis_env, "napari_sam3:segment_folder", **args))
    assert (first["DONE"], first["SKIPPED"], first["FAILED"]) == (2, 0, 0)
    for name in ("north", "south"):
        check_layer(out / f"{name}.gpkg", local_client.model_id, source=f"{name}.tif")
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.gpkg")}
    journal = json.loads((out / "napari-sam3-journal.json").read_text())
    assert set(journal["scenes"]) == {"north.tif", "south.tif"}

    again = results(qgis_process(qgis_env, "napari_sam3:segment_folder", **args))
    assert (again["DONE"], again["SKIPPED"], again["FAILED"]) == (0, 2, 0)
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.gpkg")} == stamps


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "case",
    [
        "empty keywords",
        "only separators",
        "raster without CRS",
        "exemplars outside",
        "exemplars without CRS",
        "memory budget too small",
        "server down",
    ],  # fmt: skip
)
def test_bad_input_exits_non_zero_with_a_clear_message_and_writes_nothing(
    case, qgis_env, s2_tif, no_crs_tif, tiny_repository, tmp_path
):
    out = tmp_path / "out.gpkg"
    algorithm = "napari_sam3:segment_text"
    args = dict(INPUT=s2_tif, KEYWORDS="building", MODELS=tiny_repository, OUTPUT=out)
    if case == "empty keywords":
        args["KEYWORDS"], expected = "", "nothing to look for: KEYWORDS is empty"
    elif case == "only separators":
        args["KEYWORDS"], expected = " ,; ", "nothing to look for: KEYWORDS ' ,; ' holds no keyword"
    elif case == "raster without CRS":
        args["INPUT"], expected = no_crs_tif, "the raster plain.tif has no CRS"
    elif case == "exemplars outside":  # a field in another country
        far = box(10.0, 50.0, 10.01, 50.01)
        algorithm, args["EXEMPLARS"] = (
            "napari_sam3:segment_exemplars",
            exemplar_file(
                tmp_path / "far.gpkg", [far], [1], crs="EPSG:4326", layer_crs="EPSG:4326"
            ),
        )
        expected = "all 1 exemplars from far.gpkg fall outside every raster given"
    elif case == "exemplars without CRS":
        algorithm, args["EXEMPLARS"] = (
            "napari_sam3:segment_exemplars",
            exemplar_file(tmp_path / "bare.gpkg", [pixel_box(5, 5, 30, 30)], [1], crs=None),
        )
        expected = "bare.gpkg has no CRS, so its coordinates cannot be placed on the raster"
    elif case == "memory budget too small":
        args["MEMORY_GIB"], expected = 0.01, "is too small to plan a scene with"
    else:
        del args["MODELS"]
        args.update(SERVER=f"127.0.0.1:{_free_port()}", CONNECT_TIMEOUT=1)
        expected = "no ready Triton server at 127.0.0.1"
    done = qgis_process(qgis_env, algorithm, **args)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert expected in said, said[-2000:]
    assert "Traceback" not in said
    assert not out.exists()

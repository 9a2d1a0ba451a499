"""Every option of `napari-sam3 segment` reaches the parallel path (--workers, --dask, --resume).

On the code before: `segment FOLDER --workers 2` built its clients from a `ClientFactory` that knew
no TLS and no timeouts, and dropped --exemplars and the post-processing flags (and the provenance
columns) while exiting 0: the serial run gave text and concept objects with model_id,
random_weights, checkpoint and postprocess, the parallel one text objects only, none of those.

Here the same rasters and options run serially, with --workers 2 (a LocalCluster the CLI starts)
and on a running dask.distributed cluster (--dask), embedded and through a real mutual-TLS Triton
server, and give identical polygons, prompt kinds and provenance. A table checks that each CLI
option lands in what the workers get (the ConnectionSpec, the Query, the SceneSettings or
the other segment_scenes arguments).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import pyogrio
import pytest
import rasterio
from shapely.geometry import box

from napari_sam3.cli import _batch_plan, _scene_inputs, build_parser, main
from napari_sam3.client.connection import OPTIONS, ConnectionSpec
from napari_sam3.imagery.raster import read_raster
from napari_sam3.prompts.concept import Concept

from .._required import require_tritonserver
from .conftest import write_geotiff

needs_server = pytest.mark.needs_tritonserver

PROVENANCE = ["model_id", "random_weights", "checkpoint", "postprocess"]
POST = ["--min-area-m2", "300", "--fill-holes", "--simplify-m", "5"]
PROMPTS = ["--prompt", "building", "--score-thr", "0", "--max-det", "6"]


@pytest.fixture(scope="module")
def rasters(s2_rgb_raster, tmp_path_factory) -> Path:
    """Two cuts of the Sentinel-2 scene: one in its own CRS, one labelled in another zone."""
    root = tmp_path_factory.mktemp("option_rasters")
    data, t, crs = s2_rgb_raster.data, s2_rgb_raster.transform, str(s2_rgb_raster.crs)
    write_geotiff(root / "north.tif", np.ascontiguousarray(data[:, 40:264, 500:724]), crs,
                  t * rasterio.Affine.translation(500, 40))  # fmt: skip
    write_geotiff(root / "south.tif", np.ascontiguousarray(data[:, 420:532, 900:1124]),
                  "EPSG:32634", t * rasterio.Affine.translation(900, 420))  # fmt: skip
    return root


def _exemplar_file(raster: Path, path: Path, pixel_boxes, labels=None, crs=True) -> Path:
    """Pixel boxes of `raster` as polygons in its CRS (or with no CRS at all)."""
    with rasterio.open(raster) as ds:
        transform, raster_crs = ds.transform, ds.crs
    geoms = []
    for c0, r0, c1, r1 in pixel_boxes:
        x0, y0 = transform @ (c0, r0)
        x1, y1 = transform @ (c1, r1)
        geoms.append(box(min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)))
    frame = {"label": labels} if labels is not None else {}
    gdf = gpd.GeoDataFrame(frame, geometry=geoms, crs=raster_crs if crs else None)
    gdf.to_file(path, engine="pyogrio")
    return path


@pytest.fixture(scope="module")
def exemplars(rasters, tmp_path_factory) -> dict[str, Path]:
    """Exemplar boxes on the north raster: positives; with a label column (one negative); and
    the same boxes in a file without a CRS."""
    root = tmp_path_factory.mktemp("option_exemplars")
    north = rasters / "north.tif"
    boxes = [(20, 30, 60, 70), (130, 120, 180, 170)]
    return {
        "plain": _exemplar_file(north, root / "roofs.gpkg", boxes),
        "labelled": _exemplar_file(north, root / "labelled.gpkg", boxes, ["positive", "negative"]),
        "no_crs": _exemplar_file(north, root / "no_crs.shp", boxes, crs=False),
    }


@pytest.fixture(scope="module")
def concept_file(local_client, rasters, tmp_path_factory) -> Path:
    image = read_raster(rasters / "north.tif")
    concept = local_client.encode_exemplars(image, [[10, 10, 50, 60]], name="")
    return concept.save(tmp_path_factory.mktemp("option_concepts") / "sheds.npz")


def _layers(out: Path) -> dict[str, pd.DataFrame]:
    return {
        p.stem: pyogrio.read_dataframe(p, layer="detections") for p in sorted(out.glob("*.gpkg"))
    }


def _assert_identical(got: dict, want: dict) -> None:
    assert got.keys() == want.keys() and got
    for name in want:
        a, b = got[name], want[name]
        assert list(a.columns) == list(b.columns), name
        assert len(a) == len(b), (name, len(a), len(b))
        pd.testing.assert_frame_equal(
            pd.DataFrame(a.drop(columns="geometry")), pd.DataFrame(b.drop(columns="geometry"))
        )
        assert a.geometry.to_wkb().tolist() == b.geometry.to_wkb().tolist(), name


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(["segment", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.err


# ----------------------------------------------------------------------------- end to end


def test_serial_workers_and_a_dask_cluster_give_identical_layers(
    rasters, exemplars, tiny_repository, dask_cluster, tmp_path, capsys
):
    common = [rasters, "--models", tiny_repository, "--precision", "fp32", *PROMPTS, "--exemplars",
              exemplars["plain"], *POST, "--quiet"]  # fmt: skip
    code, err = _run(capsys, *common, "--out", tmp_path / "serial")
    assert code == 0, err
    serial = _layers(tmp_path / "serial")
    code, err = _run(capsys, *common, "--out", tmp_path / "workers", "--workers", "2")
    assert code == 0, err
    code, err = _run(capsys, *common, "--out", tmp_path / "dask", "--dask",
                     dask_cluster.scheduler_address)  # fmt: skip
    assert code == 0, err

    _assert_identical(_layers(tmp_path / "workers"), serial)
    _assert_identical(_layers(tmp_path / "dask"), serial)
    both = pd.concat([pd.DataFrame(g.drop(columns="geometry")) for g in serial.values()])
    assert set(both["prompt_kind"]) == {"text", "concept"}
    assert set(both["keyword"]) == {"building", "roofs"}
    assert set(PROVENANCE) <= set(both.columns)
    assert set(both["random_weights"]) == {True} and both["model_id"].str.len().min() > 0
    assert set(both["postprocess"]) == {"min_area_m2=300,fill_holes,simplify=5"}
    assert both["area_m2"].min() >= 300

    # --resume with the same options (the exemplar concepts encoded afresh) rewrites nothing
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "workers").glob("*.gpkg")}
    code = main(["segment", *map(str, common), "--out", str(tmp_path / "workers"), "--resume"])
    assert code == 0 and capsys.readouterr().out.count("skipped") >= 2
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "workers").glob("*.gpkg")} == mtimes
    # ... while exemplars of the same name elsewhere are another run: refused without --overwrite
    shifted = [(24, 34, 64, 74), (134, 124, 184, 174)]  # the same tiles, the same concept count
    moved = _exemplar_file(rasters / "north.tif", tmp_path / "roofs.gpkg", shifted)
    other = [moved if a == exemplars["plain"] else a for a in common]
    code = main(["segment", *map(str, other), "--out", str(tmp_path / "workers"), "--resume"])
    assert code == 2 and "journal does not show it finished" in capsys.readouterr().err


def _tls(certs: Path, tls_server: str) -> list:
    return ["--server", tls_server, "--tls", "--tls-root-cert", certs / "ca.pem",
            "--tls-client-cert", certs / "client.pem", "--tls-client-key", certs / "client.key",
            "--connect-timeout", "60", "--request-timeout", "120", "--deadline", "200"]  # fmt: skip


@needs_server
def test_through_a_mutual_tls_server_the_workers_match_the_serial_run(
    rasters, exemplars, tls_server, certs, dask_cluster, tmp_path, capsys
):
    common = [rasters, *_tls(certs, tls_server), *PROMPTS, "--exemplars", exemplars["plain"],
              *POST, "--quiet"]  # fmt: skip
    code, err = _run(capsys, *common, "--out", tmp_path / "serial")
    assert code == 0, err
    code, err = _run(capsys, *common, "--out", tmp_path / "workers", "--workers", "2")
    assert code == 0, err
    code, err = _run(capsys, *common, "--out", tmp_path / "dask", "--dask",
                     dask_cluster.scheduler_address)  # fmt: skip
    assert code == 0, err
    serial = _layers(tmp_path / "serial")
    _assert_identical(_layers(tmp_path / "workers"), serial)
    _assert_identical(_layers(tmp_path / "dask"), serial)
    both = pd.concat([pd.DataFrame(g.drop(columns="geometry")) for g in serial.values()])
    assert set(both["prompt_kind"]) == {"text", "concept"} and set(PROVENANCE) <= set(both)

    # Without the client certificate the server refuses: nothing runs (exit 2), nothing written.
    without = [
        a for a in common if str(a) not in {str(certs / "client.pem"), str(certs / "client.key")}
    ]
    without = [a for a in without if a not in ("--tls-client-cert", "--tls-client-key")]
    code, err = _run(capsys, *without, "--connect-timeout", "3", "--out", tmp_path / "refused",
                     "--workers", "2")  # fmt: skip
    assert code == 2 and "this client uses TLS" in err
    assert not list((tmp_path / "refused").glob("*.gpkg"))


# ----------------------------------------------------------------------------- option by option


def _plan(argv: list) -> tuple[ConnectionSpec, dict]:
    args = build_parser().parse_args(["segment", *map(str, argv)])
    return _batch_plan(args, _scene_inputs(args.rasters))


def _concepts(plan: dict) -> list[Concept]:
    return [c for c in plan["query"].concepts if isinstance(c, Concept)]


def _q(plan: dict) -> Any:
    """The Query every worker gets."""
    return plan["query"]


def _s(plan: dict) -> Any:
    """The SceneSettings every worker gets."""
    return plan["settings"]


def _labels(plan: dict) -> list[int]:
    return [int(v) for c in _concepts(plan) for v in c.labels]


# option -> (extra arguments, what the workers must get); "{...}" are filled from the fixtures.
# The base run is `RASTERS --models REPO --prompt building --out OUT --workers 2`; options marked
# TLS run against the mutual-TLS server instead of --models.
CASES = {
    "rasters": ([], lambda s, p, f: [x.name for x in p["paths"]] == ["north.tif", "south.tif"]),
    "--prompt": (["--prompt", "road"], lambda s, p, f: _q(p).keywords == ("road",)),
    "--keywords": (
        ["--keywords", "road;water"],
        lambda s, p, f: _q(p).keywords == ("road", "water"),
    ),
    "--concept": (
        ["--concept", "{concept}"],
        lambda s, p, f: [c.name for c in _concepts(p)] == ["sheds"],
    ),
    "--exemplars": (
        ["--exemplars", "{plain}"],
        # the two boxes lie in two tiles of the grid: one concept each
        lambda s, p, f: (
            [c.name for c in _concepts(p)] == ["roofs", "roofs"] and _labels(p) == [1, 1]
        ),
    ),
    "--exemplar-label-column": (
        ["--exemplars", "{labelled}", "--exemplar-label-column", "label"],
        lambda s, p, f: _labels(p) == [1, 0],
    ),
    "--exemplars-crs": (
        ["--exemplars", "{no_crs}", "--exemplars-crs", "EPSG:32633"],
        lambda s, p, f: [c.name for c in _concepts(p)] == ["no_crs", "no_crs"],
    ),
    "--server": (["TLS"], lambda s, p, f: s.servers == (f["server"],) and not s.embedded),
    "--models": ([], lambda s, p, f: s.repository == str(f["repository"])),
    "--out": ([], lambda s, p, f: Path(p["out_dir"]) == f["out"]),
    "--format": (["--format", "fgb"], lambda s, p, f: p["fmt"] == "fgb"),
    "--overwrite": (["--overwrite"], lambda s, p, f: p["overwrite"] is True),
    "--tile-size": (["--tile-size", "96"], lambda s, p, f: _s(p).tile_size == 96),
    "--tile-overlap": (["--tile-overlap", "9"], lambda s, p, f: _s(p).overlap == 9),
    "--bands": (["--bands", "3,2,1"], lambda s, p, f: list(_s(p).bands) == [3, 2, 1]),
    "--nodata": (["--nodata", "7"], lambda s, p, f: _s(p).nodata == 7.0),
    "--score-thr": (["--score-thr", "0.25"], lambda s, p, f: _q(p).score_thr == 0.25),
    "--max-det": (["--max-det", "4"], lambda s, p, f: _q(p).max_det == 4),
    "--dedup": (["--dedup", "0.6"], lambda s, p, f: _q(p).dedup == 0.6),
    "--simplify": (["--simplify", "1.5"], lambda s, p, f: p["simplify"] == 1.5),
    "--min-area-m2": (
        ["--min-area-m2", "250"],
        lambda s, p, f: _q(p).postprocess.min_area_m2 == 250,
    ),
    "--min-area-px": (["--min-area-px", "12"], lambda s, p, f: _q(p).postprocess.min_area_px == 12),
    "--fill-holes": (["--fill-holes"], lambda s, p, f: _q(p).postprocess.fill_holes is True),
    "--regularize": (["--regularize"], lambda s, p, f: _q(p).postprocess.regularize is True),
    "--smooth": (["--smooth"], lambda s, p, f: _q(p).postprocess.smooth is True),
    "--simplify-m": (["--simplify-m", "2.5"], lambda s, p, f: _q(p).postprocess.simplify == 2.5),
    "--connect-timeout": (
        ["TLS", "--connect-timeout", "42"],
        lambda s, p, f: s.connect_timeout == 42.0,
    ),
    "--request-timeout": (
        ["TLS", "--request-timeout", "77"],
        lambda s, p, f: s.request_timeout == 77.0 and s.total_deadline == 200.0,
    ),
    "--deadline": (["TLS", "--deadline", "95"], lambda s, p, f: s.deadline == 95.0),
    "--tls": (["TLS"], lambda s, p, f: s.tls is True),
    "--tls-root-cert": (["TLS"], lambda s, p, f: s.root_certificates == str(f["certs"] / "ca.pem")),
    "--tls-client-cert": (
        ["TLS"],
        lambda s, p, f: s.certificate_chain == str(f["certs"] / "client.pem"),
    ),
    "--tls-client-key": (
        ["TLS"],
        lambda s, p, f: s.private_key == str(f["certs"] / "client.key"),
    ),
    "--runtime": (["--runtime", "onnxruntime"], lambda s, p, f: s.runtime == "onnxruntime"),
    "--precision": (["--precision", "fp32"], lambda s, p, f: s.precision == "fp32"),
    "--threads": (["--threads", "1"], lambda s, p, f: s.threads == 1),
    "--cache-mib": (["--cache-mib", "64"], lambda s, p, f: s.cache_bytes == 64 * 2**20),
    "--workers": ([], lambda s, p, f: p["workers"] == 2 and p["scheduler"] is None),
    "--dask": (
        ["--dask", "tcp://127.0.0.1:8786"],
        lambda s, p, f: p["scheduler"] == "tcp://127.0.0.1:8786" and p["workers"] is None,
    ),
    "--resume": (["--resume"], lambda s, p, f: p["resume"] is True),
    "--bbox": (
        ["--bbox", "330000,5812000,335000,5816000,EPSG:32633"],
        lambda s, p, f: (
            (_s(p).aoi.minx, _s(p).aoi.maxy, _s(p).aoi.crs) == (330000.0, 5816000.0, "EPSG:32633")
        ),
    ),
    "--gsd": (["--gsd", "15"], lambda s, p, f: _s(p).gsd == 15.0),
    "--memory-budget": (
        ["--memory-budget", "900MB"],
        lambda s, p, f: _s(p).memory_budget == 900_000_000,
    ),
}
# Options with no effect on what a worker computes, and why.
NOT_FOR_WORKERS = {
    "--help": "argparse's own",
    "--quiet": "progress bars: workers never draw them",
    "--assets": "STAC items only, which the parallel path refuses (tested in tests/imagery)",
    # the STAC API search runs once, before the run: its items are the inputs
    **dict.fromkeys(
        ("--stac", "--collections", "--datetime", "--filter", "--max-items"),
        "the search, made before the run (tests/imagery/test_stac_search.py)",
    ),
    # a basemap runs in this process only (refused on workers: tests/imagery/test_basemap.py)
    **dict.fromkeys(("--zoom", "--attribution"), "basemaps, which the parallel path refuses"),
}


def test_every_segment_option_is_in_the_table():
    (segment,) = [
        a for a in build_parser()._subparsers._group_actions[0].choices.values()
        if a.prog.endswith(" segment")
    ]  # fmt: skip
    options = {(a.option_strings[-1] if a.option_strings else a.dest) for a in segment._actions}
    assert options == set(CASES) | set(NOT_FOR_WORKERS)
    # every field of the ConnectionSpec has an option, and so a case
    assert set(OPTIONS) == {f for f in ConnectionSpec.__dataclass_fields__}
    assert set(OPTIONS.values()) <= set(CASES)


@pytest.mark.parametrize("option", sorted(CASES))
def test_each_option_reaches_the_workers(
    option, rasters, exemplars, concept_file, tiny_repository, request, tmp_path
):
    extra, check = CASES[option]
    fill = {**{k: str(v) for k, v in exemplars.items()}, "concept": str(concept_file)}
    extra = [a.format(**fill) for a in extra]
    found = {"repository": tiny_repository, "out": tmp_path / "out"}
    model = ["--models", tiny_repository, "--precision", "fp32"]
    if "TLS" in extra:
        require_tritonserver()
        server = request.getfixturevalue("tls_server")
        certs = request.getfixturevalue("certs")
        found.update(server=server, certs=certs)
        extra.remove("TLS")
        model = _tls(certs, server)
    scale = [] if option == "--dask" else ["--workers", "2"]
    prompt = [] if option in ("--prompt", "--keywords") else ["--prompt", "building"]
    argv = [rasters, *model, *prompt, "--out", tmp_path / "out", *scale, *extra]
    spec, plan = _plan(argv)
    assert check(spec, plan, found), (option, spec, plan)
    # what goes to the workers survives the trip (dask pickles the task's arguments)
    again_spec, again_plan = pickle.loads(pickle.dumps((spec, plan)))
    assert again_spec == spec and again_plan.keys() == plan.keys()
    assert again_plan["query"] == plan["query"]
    assert again_plan["settings"].key() == plan["settings"].key()
    assert not list(tmp_path.glob("out/*")), "planning writes nothing"


def test_options_of_the_other_engine_are_refused(rasters, tiny_repository, tmp_path, capsys):
    base = [rasters, "--prompt", "x", "--out", tmp_path / "o", "--workers", "2"]
    for extra, message in (
        (["--models", tiny_repository, "--tls"], "--tls: for Triton servers"),
        (["--models", tiny_repository, "--deadline", "5"], "--deadline: for Triton"),
        (["--server", "127.0.0.1:1", "--runtime", "openvino"], "--runtime: for the embedded"),
        (["--server", "127.0.0.1:1", "--tls-root-cert", "ca.pem"], "need --tls"),
        (["--models", tiny_repository, "--cache-mib", "0"], "--cache-mib must be a positive"),
        (
            ["--server", "127.0.0.1:1", "--request-timeout", "0"],
            "--request-timeout must be a positive number of seconds",
        ),
    ):
        code, err = _run(capsys, *base, *extra)
        assert code == 2 and message in err, (extra, err)
    assert not (tmp_path / "o").exists()

"""Folders of scenes on a real dask LocalCluster: outputs, failures, resume, the lock."""

from __future__ import annotations

import json
import os

import numpy as np
import pyogrio
import pytest
import rasterio

from napari_sam3.cli import main
from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.imagery.raster import read_raster
from napari_sam3.scene.batch import JOURNAL, LOCK, segment_scenes, worker_budget
from napari_sam3.serving.ports import free_port

from .conftest import write_geotiff

ARGS = ["--prompt", "building", "--score-thr", "0", "--quiet", "--format", "gpkg"]


@pytest.fixture(scope="module")
def folder(s2_rgb_paths, tmp_path_factory):
    """Two true-colour cuts of the Sentinel-2 scene (two CRS), a float32 one-band DEM-like
    raster and a GeoTIFF truncated half way."""
    root = tmp_path_factory.mktemp("scenes")
    full = read_raster(s2_rgb_paths)
    data, t = full.data, full.transform
    write_geotiff(root / "north.tif", data[:, :224, :336], str(full.crs), t)
    write_geotiff(root / "south.tif", data[:, 400:624, 600:824], "EPSG:32634", t)
    dem = data[:1, 200:424, 900:1124].astype(np.float32) / 7.0
    write_geotiff(root / "dem.tif", dem, str(full.crs), t)
    broken = write_geotiff(root / "truncated.tif", data[:, :300, :300], str(full.crs), t)
    size = broken.stat().st_size
    with open(broken, "r+b") as f:
        f.truncate(size // 2)
    return root


def counts(out):
    return {
        p.stem: pyogrio.read_info(p, layer="detections")["features"] for p in out.glob("*.gpkg")
    }


def test_workers_2_match_a_serial_run_and_resume_rewrites_nothing(
    folder, tiny_repository, tmp_path, capsys
):
    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    paths = sorted(folder.glob("*.tif"))
    serial = segment_scenes(spec, paths, tmp_path / "serial", prompt="building", score_thr=0.0)
    assert set(serial.failed) == {str(folder / "truncated.tif")}

    out = tmp_path / "out"
    code = main(["segment", str(folder), "--models", str(tiny_repository), "--precision", "fp32", "--out", str(out),
                 "--workers", "2", *ARGS])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "truncated.tif" in err.split("failed:")[-1]
    got = counts(out)
    assert set(got) == {"north", "south", "dem"}
    assert got == counts(tmp_path / "serial") and sum(got.values()) > 0
    journal = json.loads((out / JOURNAL).read_text())["scenes"]
    assert journal["truncated.tif"]["status"] == "failed"
    assert {k for k, v in journal.items() if v["status"] == "done"} == {f"{s}.tif" for s in got}
    assert not list(out.glob(".*.gpkg")) and not (out / LOCK).exists()  # no temporaries left

    # stamped with a time long past: a rewritten output would carry the time of writing
    long_ago = 10**18
    for p in out.glob("*.gpkg"):
        os.utime(p, ns=(long_ago, long_ago))
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.glob("*.gpkg")}
    assert set(mtimes.values()) == {long_ago}
    code = main(["segment", str(folder), "--models", str(tiny_repository), "--precision", "fp32", "--out", str(out),
                 "--workers", "2", "--resume", *ARGS])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1 and captured.out.count("skipped") >= 3
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.gpkg")} == mtimes


def test_changed_input_or_options_are_not_skipped(folder, tiny_repository, tmp_path):
    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    paths = [folder / "north.tif"]
    out = tmp_path / "out"
    first = segment_scenes(spec, paths, out, prompt="building", score_thr=0.0)
    assert list(first.done) == [str(paths[0])]
    again = segment_scenes(spec, paths, out, prompt="building", score_thr=0.0, resume=True)
    assert list(again.skipped) == [str(paths[0])] and not again.done
    # another memory budget finds the same objects: not a changed option
    budget = segment_scenes(spec, paths, out, prompt="building", score_thr=0.0, resume=True,
                            memory_budget="700MB")  # fmt: skip
    assert list(budget.skipped) == [str(paths[0])] and not budget.done
    with pytest.raises(FileExistsError, match="overwrite"):
        segment_scenes(spec, paths, out, prompt="road", score_thr=0.0, resume=True)


def test_a_second_run_on_a_locked_folder_refuses(folder, tiny_repository, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
    code = main(["segment", str(folder / "north.tif"), "--models", str(tiny_repository), "--precision", "fp32",
                 "--out", str(out), "--resume", *ARGS])  # fmt: skip
    assert code == 2 and "being written by another run" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [LOCK]  # nothing written
    # a lock whose run has ended is taken over
    (out / LOCK).write_text(json.dumps({"pid": 2**22 + 12345, "host": os.uname().nodename}))
    with pytest.warns(UserWarning, match="stale lock"):
        result = segment_scenes(
            ConnectionSpec(repository=str(tiny_repository), precision="fp32"), [folder / "north.tif"], out,
            prompt="building",
        )  # fmt: skip
    assert result.ok and not (out / LOCK).exists()


def test_a_scheduler_that_does_not_answer_is_named(folder, tiny_repository, tmp_path):
    address = f"tcp://127.0.0.1:{free_port()}"
    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    with pytest.raises(ConnectionError) as error:
        segment_scenes(spec, [folder / "north.tif"], tmp_path / "o", prompt="building",
                       scheduler=address, scheduler_timeout=0.5)  # fmt: skip
    assert str(error.value).startswith(f"no dask scheduler answers at {address} within 0.5 s (")
    assert not list((tmp_path / "o").glob("*.gpkg"))


def test_a_band_free_label_raster_folder(folder, tiny_repository, tmp_path):
    """tif outputs too: label rasters on each scene's grid."""
    out = tmp_path / "labels"
    result = segment_scenes(
        ConnectionSpec(repository=str(tiny_repository), precision="fp32"), [folder / "south.tif"], out,
        fmt="tif", prompt="building", score_thr=0.0,
    )  # fmt: skip
    assert result.ok
    with rasterio.open(out / "south.tif") as ds, rasterio.open(folder / "south.tif") as src:
        assert ds.crs == src.crs and ds.shape == src.shape


def test_a_local_cluster_shares_the_machine_s_default_budget_among_its_workers():
    from napari_sam3.scene.budget import DEFAULT_BUDGET_CAP, MIN_BUDGET

    gib = 2**30
    assert worker_budget(4, available=16 * gib) == DEFAULT_BUDGET_CAP // 4  # capped, then shared
    assert worker_budget(2, available=2 * gib) == gib // 4  # a quarter of 2 GiB, in two
    assert worker_budget(64, available=16 * gib) == MIN_BUDGET  # never below the floor

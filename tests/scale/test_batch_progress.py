"""segment_scenes' per-tile progress hook (serial runs): reports every tile of every scene, and a
cancel raised from it stops the run with the finished scenes kept and nothing partial written."""

from __future__ import annotations

import json

import geopandas as gpd
import pytest

from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.imagery.raster import read_raster
from napari_sam3.scene.batch import JOURNAL, LOCK, segment_scenes
from napari_sam3.scene.journal import journal_path, journaled_tiles

from .conftest import write_geotiff


class Stop(BaseException):
    """What a caller's cancel raises (not an Exception: no per-scene retry may swallow it)."""


@pytest.fixture(scope="module")
def two_scenes(s2_rgb_paths, tmp_path_factory):
    root = tmp_path_factory.mktemp("progress")
    full = read_raster(s2_rgb_paths)
    for name, (r, c) in (("a", (0, 0)), ("b", (300, 500))):
        write_geotiff(root / f"{name}.tif", full.data[:, r : r + 150, c : c + 200], str(full.crs))
    return sorted(root.glob("*.tif"))


def test_progress_reports_every_tile_and_a_cancel_keeps_the_finished_scenes(
    two_scenes, tiny_repository, tmp_path
):
    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    seen = []
    out = tmp_path / "out"
    segment_scenes(spec, two_scenes, out, progress=lambda *a: seen.append(a), prompt="building")
    for path in two_scenes:
        ticks = [(done, total) for p, done, total in seen if p == path]
        assert [d for d, _ in ticks] == list(range(1, ticks[0][1] + 1))  # every tile, in order

    def cancel_in_b(path, done, total):
        if path.name == "b.tif" and done == 2:
            raise Stop

    again = tmp_path / "again"
    with pytest.raises(Stop):
        segment_scenes(spec, two_scenes, again, progress=cancel_in_b, prompt="building")
    # no b, no lock; b's finished tiles are journaled beside where it goes
    partial = journal_path(again / "b.gpkg")
    assert sorted(p.name for p in again.iterdir()) == ["a.gpkg", partial.name, JOURNAL]
    assert journaled_tiles(partial) == 2
    assert set(json.loads((again / JOURNAL).read_text())["scenes"]) == {"a.tif"}
    with pytest.raises(FileExistsError, match="unfinished run of b.gpkg .2 tiles"):
        segment_scenes(spec, two_scenes, again, prompt="building")  # neither resume nor overwrite
    resumed = segment_scenes(spec, two_scenes, again, resume=True, prompt="building")
    assert (len(resumed.done), len(resumed.skipped)) == (1, 1)
    assert not (again / LOCK).exists() and not partial.exists()


def test_a_scene_tried_again_continues_the_journal_its_failed_try_left(
    two_scenes, tiny_repository, tmp_path
):
    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    plain = segment_scenes(spec, two_scenes, tmp_path / "plain", prompt="building")
    failed = []

    def fail_once_in_b(path, done, total):
        if path.name == "b.tif" and done == 2 and not failed:
            failed.append(done)
            raise RuntimeError("the server went away")  # an Exception: the scene is tried again

    out = tmp_path / "out"
    result = segment_scenes(spec, two_scenes, out, progress=fail_once_in_b, prompt="building")
    assert failed == [2] and not result.failed, result.failed
    assert len(result.done) == 2 and not journal_path(out / "b.gpkg").exists()
    for name in ("a.gpkg", "b.gpkg"):
        got = gpd.read_file(out / name)
        want = gpd.read_file(tmp_path / "plain" / name)
        assert len(got) == len(want) and got.geom_equals_exact(want.geometry, 0).all()
    assert len(plain.done) == 2


def test_progress_is_refused_for_a_dask_cluster(two_scenes, tiny_repository, tmp_path):
    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    with pytest.raises(ValueError, match="progress reports tiles of scenes run in this process"):
        segment_scenes(spec, two_scenes, tmp_path, workers=2, progress=print, prompt="building")

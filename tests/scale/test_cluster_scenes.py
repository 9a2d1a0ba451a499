"""Remote scenes on the parallel path, and one scene across a real dask cluster.

COGs are served by a real range-capable HTTP server on loopback (tests/imagery/http_server.py,
which gives ETag and Last-Modified as static servers do); the workers are real dask.distributed
worker processes. A serial run of the same scenes is the reference: the polygons (WKB), their
attributes and provenance must be identical.
"""

from __future__ import annotations

import json
import os
import pickle

import pyogrio
import pytest

from napari_sam3.cli import main
from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.core.errors import RunFailed
from napari_sam3.imagery.raster import read_raster
from napari_sam3.imagery.remote import TOKEN_ENV
from napari_sam3.prompts.query import Query
from napari_sam3.scene.batch import JOURNAL, segment_scenes
from napari_sam3.scene.cluster import SceneCluster
from napari_sam3.scene.driver import segment_to_file
from napari_sam3.scene.settings import SceneSettings

from ..imagery.conftest import s2_cogs, write_cog  # noqa: F401 (s2_cogs: a fixture)
from ..imagery.http_server import RangeServer
from .conftest import write_geotiff

SECRET = "tok-5e1f9b2c-never-in-a-task"
ARGS = ["--prompt", "building", "--score-thr", "0", "--quiet", "--tile-size", "112"]


@pytest.fixture(scope="module")
def scenes(s2_rgb_paths, tmp_path_factory):
    """Three true-colour cuts of the Sentinel-2 scene as COGs (3 bands, 64 px blocks), each of
    several 112 px tiles."""
    root = tmp_path_factory.mktemp("cluster_scenes")
    full = read_raster(s2_rgb_paths)
    data, t, crs = full.data, full.transform, str(full.crs)
    cuts = {
        "north": data[:, :224, :336],
        "mid": data[:, 300:524, 500:724],
        "south": data[:, 500:700, 900:1200],
    }
    out = {}
    for name, cut in cuts.items():
        plain = write_geotiff(root / f"{name}_plain.tif", cut, crs, t)
        out[name] = write_cog(plain, root / f"{name}.tif")
    return out


def _layer(path):
    df = pyogrio.read_dataframe(path, layer="detections")
    return df.sort_values("label_id").reset_index(drop=True)


def _assert_same(got, want):
    a, b = _layer(got), _layer(want)
    assert len(a) == len(b) and len(a) > 0
    assert list(a.geometry.to_wkb()) == list(b.geometry.to_wkb())
    pd_a, pd_b = a.drop(columns="geometry"), b.drop(columns="geometry")
    assert pd_a.equals(pd_b), pd_a.compare(pd_b) if pd_a.shape == pd_b.shape else pd_a.columns


def test_one_scene_across_two_workers_is_the_serial_run(
    scenes, tiny_repository, dask_cluster, tmp_path, capsys
):
    common = [str(scenes["north"]), "--models", str(tiny_repository), "--precision", "fp32", *ARGS]
    assert main(["segment", *common, "--out", str(tmp_path / "serial.gpkg")]) == 0
    code = main(["segment", *common, "--out", str(tmp_path / "cluster.gpkg"),
                 "--dask", dask_cluster.scheduler_address])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    _assert_same(tmp_path / "cluster.gpkg", tmp_path / "serial.gpkg")
    tiles = {int(t) for t in _layer(tmp_path / "cluster.gpkg")["tile"]}
    assert len(tiles) > 1  # the objects came from several tiles, so from several tasks


class _Cancel(BaseException):
    pass


def test_a_cancelled_scene_on_the_cluster_writes_nothing_and_leaves_no_task(
    scenes, tiny_repository, dask_cluster, tmp_path
):
    from distributed import Client

    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    client = spec.connect()
    seen = []

    def cancel(done, total):
        seen.append((done, total))
        if done == 2:
            raise _Cancel

    query, settings = Query.of(prompt="building", score_thr=0.0), SceneSettings(tile_size=112)
    with Client(dask_cluster) as dask:
        with pytest.raises(_Cancel):
            segment_to_file(client, scenes["north"], tmp_path / "x.gpkg", query, settings,
                            progress=cancel, cluster=SceneCluster(dask, spec))  # fmt: skip
        assert not (tmp_path / "x.gpkg").exists()
        assert seen[-1][0] == 2 < seen[-1][1]
        dask.run_on_scheduler(lambda dask_scheduler: None)  # the cancels have reached it
        left = [k for k in dask.who_has() if str(k).startswith("sam3-tile-")]
        assert not left
    client.close()


def test_a_remote_scene_across_the_cluster_and_a_failed_tile(
    scenes, tiny_repository, local_client, dask_cluster, tmp_path
):
    from distributed import Client

    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    client = spec.connect()
    (tmp_path / "www").mkdir()
    with RangeServer(tmp_path / "www") as server, Client(dask_cluster) as dask:
        url = server.add("mid.tif", scenes["mid"])
        query, settings = Query.of(prompt="building", score_thr=0.0), SceneSettings(tile_size=112)
        segment_to_file(client, url, tmp_path / "serial.gpkg", query, settings)
        served = server.bytes_for("mid.tif")
        server.reset_counts()
        segment_to_file(client, url, tmp_path / "cluster.gpkg", query, settings,
                        cluster=SceneCluster(dask, spec))  # fmt: skip
        assert server.bytes_for("mid.tif") > 0  # the workers read the COG themselves
        _assert_same(tmp_path / "cluster.gpkg", tmp_path / "serial.gpkg")
        assert served > 0

        # a worker that cannot make its client fails its tiles: a clear error, nothing written
        broken = ConnectionSpec(repository=str(tmp_path), precision="fp32")
        with pytest.raises(RunFailed, match=r"tile \d+ of mid.tif failed on a worker"):
            segment_to_file(client, url, tmp_path / "failed.gpkg", query, settings,
                            cluster=SceneCluster(dask, broken))  # fmt: skip
    client.close()
    assert not (tmp_path / "failed.gpkg").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".failed")]


def test_remote_scenes_on_workers_match_serial_resume_by_etag_and_no_token_travels(
    scenes, tiny_repository, tmp_path, monkeypatch, capfd
):
    import distributed

    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    sent: list[bytes] = []
    submit = distributed.Client.submit

    def recording(self, func, *args, **kwargs):
        sent.append(pickle.dumps(args))  # what travels to a worker
        return submit(self, func, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "submit", recording)
    monkeypatch.setenv(TOKEN_ENV, SECRET)  # the workers' environment, inherited at start
    (tmp_path / "www").mkdir()
    with RangeServer(tmp_path / "www") as server:
        server.token = SECRET  # without it every request is refused (401)
        server.configure()
        urls = [server.add(f"{n}.tif", scenes[n]) for n in ("north", "mid", "south")]
        options = {"prompt": "building", "score_thr": 0.0, "tile_size": 112}
        serial = segment_scenes(spec, urls, tmp_path / "serial", **options)
        assert serial.ok, serial.failed
        out = tmp_path / "out"
        result = segment_scenes(spec, urls, out, workers=2, **options)
        assert result.ok, result.failed
        for name in ("north", "mid", "south"):
            _assert_same(out / f"{name}.gpkg", tmp_path / "serial" / f"{name}.gpkg")
        journal = json.loads((out / JOURNAL).read_text())["scenes"]
        assert set(journal) == set(urls)
        assert all(e["input"]["etag"] and e["input"]["last_modified"] for e in journal.values())

        # resume: nothing changed, nothing runs; the server's validators of one file change
        mtimes = {p.name: p.stat().st_mtime_ns for p in out.glob("*.gpkg")}
        again = segment_scenes(spec, urls, out, workers=2, resume=True, **options)
        assert len(again.skipped) == 3 and not again.done
        served = tmp_path / "www" / "mid.tif"
        os.utime(served, ns=(10**18, 10**18))  # same bytes, a new ETag and Last-Modified
        again = segment_scenes(spec, urls, out, workers=2, resume=True, overwrite=True, **options)
        assert set(again.done) == {urls[1]} and len(again.skipped) == 2
        kept = {p.name: p.stat().st_mtime_ns for p in out.glob("*.gpkg")}
        assert (
            kept["north.gpkg"] == mtimes["north.gpkg"]
            and kept["south.gpkg"] == mtimes["south.gpkg"]
        )

    assert sent and not any(SECRET.encode() in blob for blob in sent)
    logged = capfd.readouterr()
    assert SECRET not in logged.out + logged.err
    assert SECRET not in (out / JOURNAL).read_text()


def test_two_scenes_that_would_write_one_output_are_refused(scenes, tiny_repository, tmp_path):
    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    (tmp_path / "www").mkdir()
    with RangeServer(tmp_path / "www") as server:
        a = server.add("a/scene.tif", scenes["north"])
        b = server.add("b/scene.tif", scenes["mid"])
        with pytest.raises(ValueError, match=r"would both write scene\.gpkg"):
            segment_scenes(spec, [a, b], tmp_path / "out", prompt="building", workers=2)


def test_a_stac_item_is_named_by_its_id_and_resumed_by_its_cogs_validators(
    s2_cogs,  # noqa: F811 - the fixture imported above
    tiny_repository,
    tmp_path,
):
    """A pystac Item (as a search gives them) whose band assets are COGs on a server: its
    output is ``<id>.gpkg``; the journal knows it by each COG's ETag, so a COG that changes on
    the server makes ``resume`` run the scene again."""
    from ..imagery.conftest import BANDS, COMMON, stac_item

    spec = ConnectionSpec(repository=str(tiny_repository), precision="fp32")
    (tmp_path / "www").mkdir()
    with RangeServer(tmp_path / "www") as server:
        hrefs = {b: server.add(f"{b}.tif", s2_cogs[b]) for b in BANDS}
        item = stac_item(s2_cogs["B04"].parent, hrefs, COMMON, item_id="S2_demo_item")
        options = {"prompt": "building", "score_thr": 0.0, "aoi": (12.60, 52.48, 12.62, 52.49)}
        out = tmp_path / "out"
        first = segment_scenes(spec, [item], out, retries=0, **options)
        assert first.ok, first.failed
        assert [p.name for p in out.glob("*.gpkg")] == ["S2_demo_item.gpkg"]
        entry = json.loads((out / JOURNAL).read_text())["scenes"]["stac-item:S2_demo_item"]
        assert [b["url"] for b in entry["input"]["bands"]] == list(hrefs.values())
        assert all(b["etag"] for b in entry["input"]["bands"])
        assert len(segment_scenes(spec, [item], out, resume=True, **options).skipped) == 1
        os.utime(tmp_path / "www" / "B03.tif", ns=(10**18, 10**18))  # the server's file changed
        again = segment_scenes(spec, [item], out, resume=True, overwrite=True, **options)
        assert len(again.done) == 1 and not again.skipped

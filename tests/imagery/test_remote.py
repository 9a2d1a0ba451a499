"""Rasters over HTTP: COGs and a STAC item served by a real range-capable server on loopback."""

from __future__ import annotations

import re

import numpy as np
import pyogrio
import pytest
import rasterio
import shapely
from rasterio.transform import array_bounds
from rasterio.warp import transform_bounds

from napari_sam3.cli import main
from napari_sam3.imagery.raster import raster_info, read_raster
from napari_sam3.imagery.remote import RemoteRasterError
from napari_sam3.imagery.stac import StacError, scene_source
from napari_sam3.scene import segment_scene
from napari_sam3.scene.aoi import AoiError, Bbox, tiles_touching

from .conftest import BANDS, item_json, stac_item


def _aoi_tenth(info) -> tuple[Bbox, tuple[int, int, int, int]]:
    """A lon/lat box around a tenth of the scene's area (a 344 px square off the block grid)."""
    r0, c0, side = 215, 601, 344
    assert side * side == pytest.approx(info.rows * info.cols / 10, rel=0.01)
    west, south, east, north = array_bounds(
        side, side, info.transform @ rasterio.Affine.translation(c0, r0)
    )
    lonlat = transform_bounds(info.crs, "EPSG:4326", west, south, east, north)
    return Bbox(*lonlat), (r0, c0, r0 + side, c0 + side)


def test_a_cog_url_is_read_with_range_requests_for_the_blocks_a_window_needs(cog_server, s2_cogs):
    url = cog_server.url("B04.tif")
    window = np.s_[300:420, 700:860]
    remote = read_raster(url, window=window)
    local = read_raster(s2_cogs["B04"], window=window)
    np.testing.assert_array_equal(remote.data, local.data)
    assert remote.transform == local.transform and remote.crs == local.crs
    assert remote.band_names == ("B04",) and remote.path == url
    # a 120 x 160 window: a few 64 px blocks, not the file
    assert 0 < cog_server.bytes_for("B04.tif") < s2_cogs["B04"].stat().st_size / 10
    assert all(h is None or h.startswith("bytes=") for _, _, h in cog_server.requests)
    # only the URL given: no folder listing, no side-car probes
    assert {path for _, path, _ in cog_server.requests} == {"/B04.tif"}


def test_an_aoi_of_a_tenth_of_the_scene_reads_at_most_a_fifth_of_its_bytes(
    cog_server, s2_cogs, local_client, scene_bytes
):
    item = cog_server.url("item.json")
    aoi, window = _aoi_tenth(raster_info([s2_cogs[b] for b in BANDS]))  # (the local files)
    # every byte of the run counts: the item, the COG headers, the stretch, the tiles
    df = segment_scene(local_client, item, "building", aoi=aoi, progress=False, score_thr=0.0)
    served = sum(cog_server.served.values())
    run = [df.attrs["tiles"][i] for i in df.attrs["tiles_run"]]
    assert 0 < len(run) < len(df.attrs["tiles"]) / 3
    # the box in degrees holds the pixel square (and a little more: UTM's grid is turned)
    r0, c0, r1, c1 = df.attrs["aoi"]
    assert r0 <= window[0] and c0 <= window[1] and r1 >= window[2] and c1 >= window[3]
    assert (r1 - r0) * (c1 - c0) < 1.2 * (window[2] - window[0]) * (window[3] - window[1])
    assert run == tiles_touching(df.attrs["tiles"], df.attrs["aoi"])
    assert all(t.row < r1 and t.row + t.height > r0 and t.col < c1 and t.col + t.width > c0
               for t in run)  # fmt: skip
    assert len(df) > 0 and set(df["tile"]) <= set(df.attrs["tiles_run"])
    print(f"AOI run: {served} of {scene_bytes} bytes ({served / scene_bytes:.1%})")
    assert served <= scene_bytes / 5
    assert {p for _, p, _ in cog_server.requests} <= {"/item.json", *(f"/{b}.tif" for b in BANDS)}


def test_segment_a_stac_item_url_at_15_m_into_the_scene_crs_and_extent(
    cog_server, tiny_repository, tmp_path, capsys
):
    out = tmp_path / "out.gpkg"
    url = cog_server.url("item.json")
    code = main(
        ["segment", url, "--models", str(tiny_repository), "--precision", "fp32", "--prompt", "building", "--gsd", "15",
         "--out", str(out), "--quiet", "--score-thr", "0"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    layer = pyogrio.read_dataframe(out, layer="detections")
    info = raster_info(scene_source(url))
    assert layer.crs.to_epsg() == info.crs.to_epsg() == 32633
    assert len(layer) > 0 and set(layer["gsd"]) == {15.0}
    west, south, east, north = array_bounds(info.rows, info.cols, info.transform)
    minx, miny, maxx, maxy = layer.total_bounds
    assert west <= minx < maxx <= east and south <= miny < maxy <= north
    # vertices on the 15 m grid from the scene's corner: exact georeferencing
    x, y = shapely.get_coordinates(layer.geometry.iloc[0]).T
    np.testing.assert_allclose((x - west) / 15, np.round((x - west) / 15), atol=1e-6)
    np.testing.assert_allclose((north - y) / 15, np.round((north - y) / 15), atol=1e-6)
    assert set(layer["source"]) == {"B04.tif+B03.tif+B02.tif"}


@pytest.mark.napari
def test_the_item_opens_in_napari_lazily(cog_server, s2_cogs, scene_bytes, make_napari_viewer):
    viewer = make_napari_viewer()
    layers = viewer.open(cog_server.url("item.json"), plugin="napari-sam3")
    assert [layer.name.split()[-1] for layer in layers] == list(BANDS)
    for layer in layers:
        assert layer.multiscale and type(layer.data[0]).__name__ == "Array"  # dask
        assert layer.data[0].shape == (768, 1536)
    # the header, and the overviews napari shows: no full-resolution block was fetched
    for band in BANDS:
        with rasterio.open(s2_cogs[band]) as ds:
            rows, cols = ds.block_shapes[0]
            first_block = min(
                int(ds.get_tag_item(f"BLOCK_OFFSET_{i}_{j}", "TIFF", bidx=1))
                for i in range(-(-ds.width // cols))
                for j in range(-(-ds.height // rows))
            )
        ends = [int(h.split("-")[1]) for _, p, h in cog_server.requests
                if p == f"/{band}.tif" and h]  # fmt: skip
        assert ends and max(ends) < first_block
    assert sum(cog_server.served.values()) < scene_bytes / 2


# ----------------------------------------------------------------------------- bad cases


@pytest.fixture
def bad_server(cog_server, s2_cogs):
    data = s2_cogs["B04"].read_bytes()
    cog_server.add("truncated.tif", data[: len(data) // 2])
    cog_server.add("page.tif", b"<!doctype html><title>Sign in</title>")
    cog_server.hang.update({"/slow.tif", "/slow.json"})
    cog_server.configure()
    return cog_server


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("missing.tif", "not found (HTTP 404)"),
        ("page.tif", "not a GeoTIFF or JPEG 2000"),
        ("truncated.tif", "truncated or damaged"),
    ],
)
def test_a_bad_url_is_a_clear_error_naming_it_and_nothing_is_written(
    bad_server, tiny_repository, tmp_path, capsys, name, reason
):
    url = bad_server.url(name)
    with pytest.raises(RemoteRasterError, match=re.escape(reason)) as caught:
        read_raster(url)
    assert url in str(caught.value)
    out = tmp_path / "out" / "out.gpkg"
    out.parent.mkdir()
    code = main(["segment", url, "--models", str(tiny_repository), "--precision", "fp32", "--prompt", "building",
                 "--out", str(out), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and url in err and reason in err
    assert list(out.parent.iterdir()) == []  # nothing, not even a temporary file


def test_a_server_that_does_not_answer_times_out(bad_server, monkeypatch):
    monkeypatch.setenv("GDAL_HTTP_TIMEOUT", "1")
    monkeypatch.setenv("GDAL_HTTP_MAX_RETRY", "0")
    url = bad_server.url("slow.tif")
    with pytest.raises(
        RemoteRasterError, match=r"did not answer in time \(GDAL_HTTP_TIMEOUT 1 s\)"
    ):
        raster_info(url)
    with pytest.raises(RemoteRasterError, match="within 1 s"):
        scene_source(bad_server.url("slow.json"))


def test_credentials_come_from_the_environment(cog_server, monkeypatch):
    cog_server.token = "s3cret"
    cog_server.configure()
    url = cog_server.url("item.json")
    with pytest.raises(RemoteRasterError, match="HTTP 401.*NAPARI_SAM3_HTTP_TOKEN"):
        scene_source(url)
    monkeypatch.setenv("NAPARI_SAM3_HTTP_TOKEN", "s3cret")
    hrefs = scene_source(url)
    assert read_raster(hrefs, window=np.s_[:8, :8]).shape == (3, 8, 8)


@pytest.mark.parametrize(
    ("bbox", "message"),
    [
        ("14.2,52.3,14.1,52.5", "were swapped"),  # west above east by 359.9 degrees
        ("14.2,52.3,14.2,52.5", "minx must be below maxx"),
        ("14.2,52.3,14.4", "give minx,miny,maxx,maxy"),
        ("a,b,c,d", "must be numbers"),
        ("14.2,95,14.4,96", "not longitude/latitude"),
        ("1,2,3,4,EPSG:99999999", "unknown CRS"),
    ],
)
def test_a_malformed_bbox_is_refused_before_anything_runs(
    cog_server, tiny_repository, tmp_path, capsys, bbox, message
):
    code = main(["segment", cog_server.url("item.json"), "--models", str(tiny_repository), "--precision", "fp32",
                 "--prompt", "building", "--bbox", bbox, "--out", str(tmp_path / "o.gpkg")])  # fmt: skip
    assert code == 2 and message in capsys.readouterr().err
    assert cog_server.served["/B04.tif"] == 0  # refused before any pixel was asked for


def test_a_bbox_outside_the_scene_says_where_the_scene_is(cog_server, local_client):
    with pytest.raises(
        AoiError, match=r"lies outside the scene, which covers 1[23]\.\d+,5[23]\.\d+"
    ):
        segment_scene(local_client, cog_server.url("item.json"), "building",
                      aoi=(2.0, 48.0, 2.1, 48.1), progress=False)  # fmt: skip


# ----------------------------------------------------------------------------- STAC assets


def test_item_bands_by_common_name_by_key_by_visual_and_by_choice(s2_cogs, cog_server, tmp_path):
    folder = s2_cogs["B04"].parent
    url = cog_server.url("item.json")
    rgb = [cog_server.url(f"{b}.tif") for b in BANDS]
    assert scene_source(url) == rgb  # eo:bands common names
    assert scene_source(url, assets="B02,B03,B04") == rgb[::-1]
    # no eo:bands, keys shuffled: red/green/blue found by key
    keyed = stac_item(folder, {"blue": "./B02.tif", "red": "./B04.tif", "green": "./B03.tif"})
    cog_server.add("keyed.json", item_json(keyed))
    assert scene_source(cog_server.url("keyed.json")) == rgb
    visual = stac_item(folder, {"thumbnail": "./B02.tif", "visual": "./B04.tif"})
    cog_server.add("visual.json", item_json(visual))
    assert scene_source(cog_server.url("visual.json")) == rgb[0]
    nothing = stac_item(folder, {"nir": "./B04.tif", "swir": "./B03.tif"})
    cog_server.add("nothing.json", item_json(nothing))
    with pytest.raises(StacError, match="choose them with --assets.*nir, swir"):
        scene_source(cog_server.url("nothing.json"))
    with pytest.raises(StacError, match="no asset B08; its assets are B04, B03, B02"):
        scene_source(url, assets=["B08", "B04", "B03"])
    # a local item reads its local files
    assert scene_source(s2_cogs["item"]) == [str(folder / f"{b}.tif") for b in BANDS]


def test_an_item_from_a_server_may_not_point_at_local_files(s2_cogs, cog_server):
    folder = s2_cogs["B04"].parent
    sneaky = stac_item(folder, {"visual": (folder / "B04.tif").as_uri()})
    cog_server.add("sneaky.json", item_json(sneaky))
    with pytest.raises(StacError, match="may point at http"):
        scene_source(cog_server.url("sneaky.json"))
    cog_server.add("notstac.json", b'{"hello": "world"}')
    with pytest.raises(StacError, match="not a STAC item"):
        scene_source(cog_server.url("notstac.json"))

"""Networks that fail (issue 42, item 5): a loopback server that answers 503/429 (Retry-After),
resets the connection mid-body, sends less than it promised, stalls or trickles, on the two paths
a remote scene takes: a COG read through a scene run (the CLI, the library below it), and a STAC
item or catalog fetched as JSON.

Each fault ends in one of two ways: retried within the deadline, with the output identical to the
fault-free run; or a clear error naming the URL (exit 1), nothing written. Every test carries a
pytest-timeout, so a hang fails instead of blocking CI. Each case serves its files under a path
of its own: GDAL caches what it read of a URL for the whole process.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyogrio
import pystac
import pytest
import rasterio

from napari_sam3.cli import main
from napari_sam3.core.errors import ConnectionFailed, TimedOut
from napari_sam3.imagery.raster import read_raster
from napari_sam3.imagery.remote import (
    RemoteTimedOut,
    RemoteUnavailable,
    deadline,
    fetch_bytes,
    forget,
    network_env,
)
from napari_sam3.imagery.stac import catalog_items, scene_source

from .conftest import BANDS, COMMON, item_json, stac_item
from .http_server import Fault, RangeServer

# Short timeouts so a stall costs seconds: a try 1 s, 2 more tries, 0.1 s between.
FAST = {"GDAL_HTTP_TIMEOUT": "1", "GDAL_HTTP_MAX_RETRY": "2", "GDAL_HTTP_RETRY_DELAY": "0.1"}
SEGMENT = ["--precision", "fp32", "--prompt", "building", "--gsd", "15", "--quiet", "--score-thr", "0"]  # fmt: skip

# The first range request of a COG is its header; `after=1` hits the first pixel request.
PIXELS = {"ranged": True, "after": 1}
PASSING = {
    "503 twice": [Fault("status", times=2, code=503, **PIXELS)],
    "429 with Retry-After": [Fault("status", times=2, code=429, retry_after=1, **PIXELS)],
    "reset mid-body": [Fault("reset", **PIXELS)],
    "body shorter than its Content-Length": [Fault("short", **PIXELS)],
    "206 shorter than asked": [Fault("short206", **PIXELS)],
    "stall": [Fault("stall", **PIXELS)],
    "trickle": [Fault("trickle", **PIXELS)],
}
FAILING = {
    "503 for ever": ([Fault("status", times=0, code=503, **PIXELS)], "HTTP 5xx/429"),
    "reset for ever": ([Fault("reset", times=0, **PIXELS)], "cut its answers short"),
    "206 short for ever": ([Fault("short206", times=0, **PIXELS)], "cut its answers short"),
    "stall for ever": ([Fault("stall", times=0, **PIXELS)], "cut its answers short"),
}


@pytest.fixture(scope="module")
def server(s2_cogs, tmp_path_factory):
    """One fault-injecting server for the module; each case uses paths of its own."""
    with RangeServer(tmp_path_factory.mktemp("faulty_www")) as srv:
        for path in s2_cogs.values():
            srv.add(f"ref/{path.name}", path)
        yield srv


@pytest.fixture
def fast(monkeypatch):
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)


def _case(name: str) -> str:
    return re.sub(r"\W+", "_", name).strip("_")


def _segment(url: str, tiny_repository, out, capsys) -> tuple[int, str]:
    code = main(["segment", url, "--models", str(tiny_repository), "--out", str(out), *SEGMENT])
    return code, capsys.readouterr().err


def _rows(path) -> list[tuple]:
    """The output's every value (geometries as WKB), in order."""
    layer = pyogrio.read_dataframe(path, layer="detections")
    layer["geometry"] = layer.geometry.to_wkb()
    return [tuple(row) for row in layer.itertuples(index=False)]


@pytest.fixture(scope="module")
def reference(server, tiny_repository, tmp_path_factory):
    """The fault-free run of /ref/B04.tif."""
    out = tmp_path_factory.mktemp("reference") / "out.gpkg"
    code = main(["segment", server.url("ref/B04.tif"), "--models", str(tiny_repository),
                 "--out", str(out), *SEGMENT])  # fmt: skip
    assert code == 0
    rows = _rows(out)
    assert rows  # something to compare
    return rows


# ----------------------------------------------------------------------------- COG, scene run


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", list(PASSING))
def test_a_transient_fault_on_a_cog_is_retried_and_the_output_is_identical(
    name, server, s2_cogs, reference, tiny_repository, tmp_path, capsys, fast
):
    path = f"{_case(name)}/B04.tif"
    server.add(path, s2_cogs["B04"])
    url = server.script(path, *PASSING[name])
    out = tmp_path / "out.gpkg"
    code, err = _segment(url, tiny_repository, out, capsys)
    assert code == 0, err
    assert server.faults_given[f"/{path}"] == PASSING[name][0].times  # the fault happened
    assert _rows(out) == reference


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", list(FAILING))
def test_a_lasting_fault_on_a_cog_fails_naming_the_url_with_nothing_written(
    name, server, s2_cogs, tiny_repository, tmp_path, capsys, fast
):
    path = f"{_case(name)}/B04.tif"
    server.add(path, s2_cogs["B04"])
    steps, reason = FAILING[name]
    url = server.script(path, *steps)
    out = tmp_path / "out" / "out.gpkg"
    out.parent.mkdir()
    code, err = _segment(url, tiny_repository, out, capsys)
    assert code == 1, err
    assert f"cannot read the pixels of {url}" in err and reason in err
    assert "Traceback" not in err
    assert list(out.parent.iterdir()) == []  # nothing, not even a temporary file
    # the server is sound again: the same URL reads in this process (nothing short stayed cached)
    server.script(path)
    with rasterio.open(s2_cogs["B04"]) as ds:
        np.testing.assert_array_equal(read_raster(url).data, ds.read())


@pytest.mark.timeout(60)
def test_lasting_faults_raise_connection_and_timeout_errors_in_the_library(server, s2_cogs, fast):
    server.add("lib/503.tif", s2_cogs["B04"])
    url = server.script("lib/503.tif", Fault("status", times=0, code=503, **PIXELS))
    with pytest.raises(RemoteUnavailable, match=re.escape(url)) as caught:
        read_raster(url)
    assert isinstance(caught.value, ConnectionFailed)
    assert "HTTP error code: 503" in str(caught.value)  # GDAL's own word on it
    server.add("lib/stall.tif", s2_cogs["B04"])
    url = server.script("lib/stall.tif", Fault("stall", times=0))  # the header never comes
    with pytest.raises(RemoteTimedOut, match=re.escape(url)) as caught:
        read_raster(url)
    assert isinstance(caught.value, TimedOut) and "GDAL_HTTP_TIMEOUT 1 s" in str(caught.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["reset", "short", "short206"])
def test_a_read_cut_short_once_is_read_again_whole(server, s2_cogs, fast, kind):
    """One read of the whole file: GDAL does not retry a body cut short, and keeps its short
    part; the read is made again after GDAL's cache of the URL is dropped."""
    server.add(f"again_{kind}/B04.tif", s2_cogs["B04"])
    url = server.script(f"again_{kind}/B04.tif", Fault(kind, **PIXELS))
    with rasterio.open(s2_cogs["B04"]) as ds:
        np.testing.assert_array_equal(read_raster(url).data, ds.read())
    assert server.faults_given[f"/again_{kind}/B04.tif"] == 1


@pytest.mark.timeout(60)
def test_a_short_block_gdal_cached_is_forgotten(server, s2_cogs, fast):
    """GDAL keeps the short part of a body it got; without forget() every later read of that
    block in the process fails again, without asking the server."""
    server.add("cache/B04.tif", s2_cogs["B04"])
    url = server.script("cache/B04.tif", Fault("short", **PIXELS))
    with network_env(), rasterio.open(url) as ds, pytest.raises(rasterio.errors.RasterioIOError):
        ds.read()
    with network_env(), rasterio.open(url) as ds, pytest.raises(rasterio.errors.RasterioIOError):
        ds.read()  # the fault is over, but GDAL still has the short block
    forget(url)
    with network_env(), rasterio.open(url) as ds, rasterio.open(s2_cogs["B04"]) as local:
        np.testing.assert_array_equal(ds.read(), local.read())


@pytest.mark.timeout(60)
def test_a_trickle_is_given_up_on_by_the_low_speed_limit(server, s2_cogs, monkeypatch):
    """A server sending a byte a second is below GDAL_HTTP_LOW_SPEED_LIMIT: given up on after
    GDAL_HTTP_LOW_SPEED_TIME although GDAL_HTTP_TIMEOUT is far off."""
    monkeypatch.setenv("GDAL_HTTP_TIMEOUT", "600")
    monkeypatch.setenv("GDAL_HTTP_LOW_SPEED_TIME", "2")
    monkeypatch.setenv("GDAL_HTTP_MAX_RETRY", "0")
    server.add("slow/B04.tif", s2_cogs["B04"])
    url = server.script("slow/B04.tif", Fault("trickle", times=0, **PIXELS))
    with pytest.raises(RemoteUnavailable, match=re.escape(url)):
        read_raster(url)


# ----------------------------------------------------------------------------- STAC JSON


def _item(server, s2_cogs, case: str) -> str:
    """An item under /<case>/ whose assets are the reference COGs (absolute URLs)."""
    folder = s2_cogs["B04"].parent
    item = stac_item(folder, {b: server.url(f"ref/{b}.tif") for b in BANDS}, COMMON)
    server.add(f"{case}/item.json", item_json(item))
    return f"{case}/item.json"


JSON_PASSING = {
    "503 twice": Fault("status", times=2, code=503),
    "429 with Retry-After": Fault("status", times=2, code=429, retry_after=1),
    "reset mid-body": Fault("reset"),
    "body shorter than its Content-Length": Fault("short"),
    "stall": Fault("stall"),
    "trickle": Fault("trickle"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(JSON_PASSING))
def test_a_transient_fault_on_a_stac_item_is_retried(name, server, s2_cogs, fast):
    path = _item(server, s2_cogs, f"json_{_case(name)}")
    url = server.script(path, JSON_PASSING[name])
    assert scene_source(url) == [server.url(f"ref/{b}.tif") for b in BANDS]
    assert server.faults_given[f"/{path}"] == JSON_PASSING[name].times


JSON_FAILING = {
    "503 for ever": (Fault("status", times=0, code=503), RemoteUnavailable, "HTTP 503"),
    "Retry-After past the deadline": (
        Fault("status", times=0, code=429, retry_after=3600),
        RemoteUnavailable,
        "Retry-After 3600 s",
    ),
    "reset for ever": (Fault("reset", times=0), RemoteUnavailable, "dropped the connection"),
    "short for ever": (Fault("short", times=0), RemoteUnavailable, "cut short"),
    "stall for ever": (Fault("stall", times=0), RemoteTimedOut, "within 1 s"),
    "trickle for ever": (Fault("trickle", times=0), RemoteTimedOut, "within 1 s"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(JSON_FAILING))
def test_a_lasting_fault_on_a_stac_item_fails_naming_it_within_the_deadline(
    name, server, s2_cogs, tiny_repository, tmp_path, capsys, fast
):
    fault, kind, reason = JSON_FAILING[name]
    path = _item(server, s2_cogs, f"jsonfail_{_case(name)}")
    url = server.script(path, fault)
    with pytest.raises(kind, match=re.escape(url)) as caught:
        fetch_bytes(url)
    assert reason in str(caught.value)
    # at most the retries allowed: none past the deadline, none at all past a far Retry-After
    tries = server.faults_given[f"/{path}"]
    assert tries == (1 if "Retry-After" in name else 1 + int(FAST["GDAL_HTTP_MAX_RETRY"]))
    out = tmp_path / "out" / "out.gpkg"
    out.parent.mkdir()
    server.script(path, fault)
    code, err = _segment(url, tiny_repository, out, capsys)
    assert code == 1, err
    assert url in err and reason in err and "Traceback" not in err
    assert list(out.parent.iterdir()) == []


def test_the_deadline_is_gdals_tries_and_their_delays(fast):
    assert deadline() == pytest.approx(3 * 1 + 0.1 * (1 + 2))


@pytest.mark.timeout(60)
def test_a_catalog_whose_child_item_fails_for_a_while_is_walked_whole(
    server, s2_cogs, tmp_path, fast
):
    folder = s2_cogs["B04"].parent
    root = pystac.Catalog("scenes", "two scenes")
    for name in ("east", "west"):
        hrefs = {b: server.url(f"ref/{b}.tif") for b in BANDS}
        root.add_item(stac_item(folder, hrefs, COMMON, item_id=name))
    root.normalize_hrefs(server.url("catalog"))
    for obj in (root, *root.get_items()):
        relative = obj.get_self_href().split("/catalog/", 1)[1]
        server.add(f"catalog/{relative}", json.dumps(obj.to_dict()).encode())
    west = "catalog/west/west.json"
    server.script(west, Fault("reset"), Fault("status", code=503, retry_after=1))
    items = catalog_items(server.url("catalog/catalog.json"))
    assert sorted(item.id for item in items) == ["east", "west"]
    assert server.faults_given[f"/{west}"] == 2
    server.script(west, Fault("status", times=0, code=502))
    with pytest.raises(RemoteUnavailable, match=re.escape(server.url(west))):
        catalog_items(server.url("catalog/catalog.json"))

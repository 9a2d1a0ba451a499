"""STAC API search against a real STAC API (rustac's server) whose items point at COGs served
by a real range-capable server; bad answers from a scripted fault server and, for pages that
never end, a tiny paging handler."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyogrio
import pytest
import shapely

from napari_sam3.cli import main
from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery import stac_search
from napari_sam3.imagery.remote import RemoteRasterError, RemoteTimedOut, RemoteUnavailable
from napari_sam3.imagery.stac import LoadedItem, read_stac, scene_source
from napari_sam3.imagery.stac_search import StacSearchError, search_items

from .conftest import BANDS, COMMON, item_json, stac_item
from .http_server import Fault
from .stac_api_server import StacApiServer

AOI = "12.60,52.48,12.62,52.49"  # a corner of the shipped Sentinel-2 scene (lon/lat)
FAR = [100.0, 10.0, 100.5, 10.5]
# id, date, cloud cover, over the scene (else far away), RGB assets
SCENES = [
    ("s2_2024_05_02", datetime(2024, 5, 2, 10, 21, tzinfo=UTC), 3.0, True, True),
    ("s2_2024_06_11", datetime(2024, 6, 11, 10, 21, tzinfo=UTC), 5.0, True, True),
    ("s2_2024_07_16", datetime(2024, 7, 16, 10, 21, tzinfo=UTC), 62.5, True, True),
    ("far_2024_06_20", datetime(2024, 6, 20, 3, 0, tzinfo=UTC), 0.0, False, True),
    ("s2_2024_08_30", datetime(2024, 8, 30, 10, 21, tzinfo=UTC), 12.0, True, True),
    ("nir_only_2024_09_04", datetime(2024, 9, 4, 10, 21, tzinfo=UTC), 1.0, True, False),
]
RUN = ["--precision", "fp32", "--prompt", "building", "--score-thr", "0", "--quiet"]


def _items(s2_cogs, cog_server) -> list[dict]:
    """The items loaded into the API: each points at the served COGs by URL."""
    folder = s2_cogs["B04"].parent
    loaded = []
    for item_id, when, cloud, here, rgb in SCENES:
        if rgb:
            hrefs, common = {b: cog_server.url(f"{b}.tif") for b in BANDS}, COMMON
        else:  # one near-infrared band: no picture to make
            hrefs, common = {"B08": cog_server.url("B04.tif")}, None
        item = stac_item(folder, hrefs, common, item_id)  # the scene's footprint
        item.datetime = when
        item.properties["eo:cloud_cover"] = cloud
        item.collection_id = "demo"
        if not here:
            west, south, east, north = FAR
            item.bbox = FAR
            item.geometry = shapely.geometry.mapping(shapely.box(west, south, east, north))
        loaded.append(item.to_dict(include_self_link=False, transform_hrefs=False))
    return loaded


@pytest.fixture
def stac_api(s2_cogs, cog_server, tmp_path):
    items = _items(s2_cogs, cog_server)
    with StacApiServer(tmp_path / "api", items) as server:
        yield server


def _expected(items: list[dict], bbox=None, start=None, end=None) -> list[str]:
    """What the search should find, worked out here from the loaded items."""
    found = []
    for item in items:
        when = datetime.fromisoformat(item["properties"]["datetime"].replace("Z", "+00:00"))
        if bbox is not None and not shapely.geometry.shape(item["geometry"]).intersects(
            shapely.box(*bbox)
        ):
            continue
        if start is not None and not (start <= when <= end):
            continue
        found.append(item["id"])
    return sorted(found)


def test_a_search_by_area_and_dates_finds_the_loaded_items_that_match(stac_api):
    box = [float(v) for v in AOI.split(",")]
    start, end = datetime(2024, 6, 1, tzinfo=UTC), datetime(2024, 8, 31, 23, 59, 59, tzinfo=UTC)
    want = _expected(stac_api.items, box, start, end)
    assert want == ["s2_2024_06_11", "s2_2024_07_16", "s2_2024_08_30"]  # the fixture's intent
    result = search_items(stac_api.url, "demo", bbox=box, datetime="2024-06/2024-08")
    assert sorted(i.id for i in result.items) == want and not result.truncated
    # pages of one item are followed to the end: the same items
    paged = search_items(stac_api.url, ["demo"], bbox=box, datetime="2024-06/2024-08", limit=1)
    assert [i.id for i in paged.items] == [i.id for i in result.items]
    assert sorted(i.id for i in search_items(stac_api.url, "demo", bbox=FAR).items) == [
        "far_2024_06_20"
    ]
    assert len(search_items(stac_api.url, "demo", limit=2).items) == len(SCENES)
    # the listing: id, date, cloud cover
    lines = {line.split()[0]: line for line in result.listing()}
    assert lines["s2_2024_07_16"].split()[1:] == ["2024-07-16", "10:21", "cloud", "62%"]
    # each item is a scene: its RGB bands, and it reads as the item itself
    scene = result.scenes[0]
    assert isinstance(scene, str) and scene.stem == scene.item.id and read_stac(scene) is scene.item
    assert scene_source(scene) == [stac_api.items[0]["assets"][b]["href"] for b in BANDS]


def test_max_items_takes_the_first_and_says_more_match_and_the_default_bound_refuses(
    stac_api, monkeypatch
):
    first = search_items(stac_api.url, "demo", max_items=2, limit=1)
    assert [i.id for i in first.items] == [s[0] for s in SCENES[:2]] and first.truncated
    whole = search_items(stac_api.url, "demo", max_items=len(SCENES))
    assert len(whole.items) == len(SCENES) and not whole.truncated
    monkeypatch.setattr(stac_search, "DEFAULT_MAX_ITEMS", 4)
    with pytest.raises(InvalidInput, match=r"more than 4 items.*--max-items"):
        search_items(stac_api.url, "demo", limit=2)


def test_what_the_api_cannot_do_and_bad_arguments_are_refused_naming_them(stac_api):
    # rustac's in-memory server declares no Filter extension: a filter would be ignored
    with pytest.raises(StacSearchError, match=r"does not declare the Filter extension.*--filter"):
        search_items(stac_api.url, "demo", filter="eo:cloud_cover<20")
    with pytest.raises(InvalidInput, match=r"--datetime '2024-13'"):
        search_items(stac_api.url, "demo", datetime="2024-13")
    with pytest.raises(InvalidInput, match="--collections"):
        search_items(stac_api.url, " , ")
    with pytest.raises(InvalidInput, match="longitude/latitude"):
        search_items(stac_api.url, "demo", bbox=[330000, 5812000, 335000, 5816000])
    # a collection's URL is not the API's landing page
    with pytest.raises(StacSearchError, match=r"collections/demo.*STAC API"):
        search_items(f"{stac_api.url}/collections/demo", "demo")


def test_segment_stac_writes_one_gpkg_per_item_identical_to_each_item_run_alone(
    stac_api, cog_server, tiny_repository, tmp_path, capsys
):
    out = tmp_path / "runs"
    code = main(["segment", "--stac", stac_api.url, "--collections", "demo", "--bbox", AOI,
                 "--datetime", "2024-06-01/2024-07-31", "--models", str(tiny_repository),
                 "--out", str(out), *RUN])  # fmt: skip
    said = capsys.readouterr()
    assert code == 0, said.err
    listed = said.out.split("napari-sam3: s2_2024_06_11:")[0]  # before the first scene ran
    assert "2 items" in listed and "s2_2024_06_11  2024-06-11 10:21  cloud 5%" in listed
    assert "s2_2024_07_16  2024-07-16 10:21  cloud 62%" in listed
    assert sorted(p.name for p in out.iterdir()) == ["s2_2024_06_11.gpkg", "s2_2024_07_16.gpkg"]
    for item in stac_api.items:
        if item["id"] not in ("s2_2024_06_11", "s2_2024_07_16"):
            continue
        # the same item, as a file on the COG server, segmented on its own
        alone = tmp_path / f"{item['id']}_alone.gpkg"
        url = cog_server.add(f"{item['id']}.json", json.dumps(item).encode())
        assert main(["segment", url, "--bbox", AOI, "--models", str(tiny_repository),
                     "--out", str(alone), *RUN]) == 0  # fmt: skip
        searched = pyogrio.read_dataframe(out / f"{item['id']}.gpkg", layer="detections")
        single = pyogrio.read_dataframe(alone, layer="detections")
        assert len(searched) > 0 and list(searched.columns) == list(single.columns)
        assert searched.drop(columns="geometry").equals(single.drop(columns="geometry"))
        assert searched.geometry.geom_equals_exact(single.geometry, 0).all()


def test_segment_stac_on_two_dask_workers_writes_the_serial_outputs(
    stac_api, tiny_repository, tmp_path, capsys
):
    """The issue's "done when": the items a search finds, as tasks of 2 worker processes that
    read the COGs themselves, give the serial run's layers (WKB and attributes)."""
    argv = ["segment", "--stac", stac_api.url, "--collections", "demo", "--bbox", AOI,
            "--datetime", "2024-06-01/2024-07-31", "--models", str(tiny_repository), *RUN]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path / "serial")]) == 0
    code = main([*argv, "--out", str(tmp_path / "workers"), "--workers", "2"])
    assert code == 0, capsys.readouterr().err
    names = sorted(p.name for p in (tmp_path / "serial").glob("*.gpkg"))
    assert names == ["s2_2024_06_11.gpkg", "s2_2024_07_16.gpkg"]
    assert sorted(p.name for p in (tmp_path / "workers").glob("*.gpkg")) == names
    for name in names:
        got = pyogrio.read_dataframe(tmp_path / "workers" / name, layer="detections")
        want = pyogrio.read_dataframe(tmp_path / "serial" / name, layer="detections")
        assert len(got) > 0 and list(got.geometry.to_wkb()) == list(want.geometry.to_wkb())
        assert got.drop(columns="geometry").equals(want.drop(columns="geometry"))


def test_an_empty_search_writes_nothing_and_exits_0(stac_api, tiny_repository, tmp_path, capsys):
    out = tmp_path / "runs"
    code = main(["segment", "--stac", stac_api.url, "--collections", "demo", "--datetime",
                 "1999", "--models", str(tiny_repository), "--out", str(out), *RUN])  # fmt: skip
    said = capsys.readouterr()
    assert code == 0 and "0 items" in said.out and "nothing written" in said.out
    assert not out.exists()


def test_an_item_without_rgb_assets_fails_alone_and_the_others_are_written(
    stac_api, tiny_repository, tmp_path, capsys
):
    out = tmp_path / "runs"
    code = main(["segment", "--stac", stac_api.url, "--collections", "demo", "--bbox", AOI,
                 "--datetime", "2024-08-15/2024-09-30", "--models", str(tiny_repository),
                 "--out", str(out), *RUN])  # fmt: skip
    said = capsys.readouterr()
    assert code == 1
    assert "FAILED" in said.err and "nir_only_2024_09_04: no red, green and blue" in said.err
    assert "--assets" in said.err
    assert sorted(p.name for p in out.iterdir()) == ["s2_2024_08_30.gpkg"]  # nothing partial


def test_search_options_without_stac_and_stac_without_collections_are_refused(
    stac_api, tiny_repository, tmp_path, capsys
):
    base = ["--models", str(tiny_repository), "--out", str(tmp_path / "o"), *RUN]
    assert main(["segment", "--collections", "demo", *base]) == 2
    assert "give --stac URL" in capsys.readouterr().err
    assert main(["segment", "--stac", stac_api.url, *base]) == 2
    assert "--collections" in capsys.readouterr().err
    assert main(["segment", *base]) == 2
    assert "or --stac URL" in capsys.readouterr().err


# ----------------------------------------------------------------------------- bad answers


def _landing(search_url: str, method: str = "GET") -> bytes:
    return json.dumps(
        {
            "type": "Catalog",
            "stac_version": "1.0.0",
            "id": "api",
            "description": "a STAC API",
            "conformsTo": [
                "https://api.stacspec.org/v1.0.0/core",
                "https://api.stacspec.org/v1.0.0/item-search",
            ],
            "links": [
                {
                    "rel": "search",
                    "href": search_url,
                    "type": "application/geo+json",
                    "method": method,
                }
            ],
        }
    ).encode()


def test_a_server_that_keeps_answering_500_is_a_clear_error_after_the_retries(
    cog_server, tiny_repository, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("GDAL_HTTP_MAX_RETRY", "2")
    monkeypatch.setenv("GDAL_HTTP_RETRY_DELAY", "0.05")
    url = cog_server.add("landing.json", _landing(cog_server.url("search")))
    cog_server.script("search", Fault("status", times=0, code=500))
    with pytest.raises(RemoteUnavailable, match=r"cannot search .*landing.json.*HTTP 500"):
        search_items(url, "demo")
    assert cog_server.faults_given["/search"] == 3  # the first try and GDAL_HTTP_MAX_RETRY more
    out = tmp_path / "runs"
    code = main(["segment", "--stac", url, "--collections", "demo", "--models",
                 str(tiny_repository), "--out", str(out), *RUN])  # fmt: skip
    assert code == 1 and "HTTP 500" in capsys.readouterr().err and not out.exists()
    # a 503 burst that passes within the retries is no failure; a Retry-After of an hour is
    # waited on only up to the deadline of one request (3 tries of 0.3 s here)
    monkeypatch.setenv("GDAL_HTTP_TIMEOUT", "0.3")
    cog_server.script("search", Fault("status", times=2, code=503, retry_after=3600))
    cog_server.add("search", json.dumps({"type": "FeatureCollection", "features": []}).encode())
    assert len(search_items(url, "demo")) == 0


def test_an_answer_that_is_not_a_stac_api_names_the_url(cog_server):
    url = cog_server.add("index.html", b"<html><body>a web page</body></html>")
    with pytest.raises(StacSearchError, match=r"index.html did not answer as a STAC API"):
        search_items(url, "demo")
    catalog = cog_server.add("catalog.json", item_json(stac_item_like_catalog()))
    with pytest.raises(StacSearchError, match=r"not a STAC API with item search.*RASTER"):
        search_items(catalog, "demo")


def stac_item_like_catalog():
    import pystac

    return pystac.Catalog("static", "a static catalog")


class _Endless(BaseHTTPRequestHandler):
    """A landing page whose search pages never end: each page one item and a next link; or,
    at /endless, one page whose body never ends."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        base = f"http://127.0.0.1:{self.server.server_port}"
        if self.path.startswith("/endless"):
            self.send_response(200)
            self.send_header("Content-Type", "application/geo+json")
            self.end_headers()
            chunk = b'{"type": "FeatureCollection", "features": [' + b" " * 65536
            try:
                while True:
                    self.wfile.write(chunk)
            except OSError:
                return
        if self.path.startswith("/search"):
            page = int(self.path.partition("page=")[2] or 0)
            item = stac_item_like_feature(f"page{page}")
            body = {
                "type": "FeatureCollection",
                "features": [item],
                "links": [{"rel": "next", "href": f"{base}/search?page={page + 1}"}],
            }
            data = json.dumps(body).encode()
        else:
            data = _landing(f"{base}{'/endless' if 'endless' in self.path else '/search'}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def stac_item_like_feature(item_id: str) -> dict:
    return {
        "type": "Feature",
        "stac_version": "1.0.0",
        "id": item_id,
        "geometry": None,
        "properties": {"datetime": "2024-06-01T00:00:00Z"},
        "links": [],
        "assets": {},
    }


@pytest.fixture
def endless():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_pages_that_never_end_are_bounded_and_a_page_that_never_ends_is_given_up_on(
    endless, monkeypatch
):
    monkeypatch.setattr(stac_search, "DEFAULT_MAX_ITEMS", 25)
    with pytest.raises(InvalidInput, match=r"more than 25 items \(or its pages do not end\)"):
        search_items(endless + "/", "demo")
    taken = search_items(endless + "/", "demo", max_items=7)
    assert [i.id for i in taken.items] == [f"page{n}" for n in range(7)] and taken.truncated
    with pytest.raises(
        StacSearchError, match=r"/endless\?collections=demo answered more than 16 MiB"
    ):
        search_items(endless + "/api-endless", "demo")


def test_a_found_item_pickles_with_its_item():
    import pickle

    import pystac

    item = pystac.Item.from_dict(stac_item_like_feature("x/y"))
    scene = LoadedItem.of(item, "http://127.0.0.1:9/api")
    again = pickle.loads(pickle.dumps(scene))
    assert again == scene
    assert again.item.id == "x/y" and again.stem == "x_y"


def test_credentials_come_from_the_environment_as_for_rasters(cog_server, monkeypatch):
    url = cog_server.add("landing.json", _landing(cog_server.url("search")))
    page = {"type": "FeatureCollection", "features": [stac_item_like_feature("secret_scene")]}
    cog_server.add("search", json.dumps(page).encode())
    cog_server.token = "s3cret"
    cog_server.configure()
    monkeypatch.delenv("NAPARI_SAM3_HTTP_TOKEN", raising=False)
    monkeypatch.setenv("NETRC", str(cog_server.root / "no-netrc"))
    with pytest.raises(RemoteRasterError, match=r"refused \(HTTP 401\).*NAPARI_SAM3_HTTP_TOKEN"):
        search_items(url, "demo")
    monkeypatch.setenv("NAPARI_SAM3_HTTP_TOKEN", "s3cret")
    assert [i.id for i in search_items(url, "demo").items] == ["secret_scene"]


def test_a_server_that_does_not_answer_times_out_naming_the_url(cog_server, monkeypatch):
    monkeypatch.setenv("GDAL_HTTP_TIMEOUT", "1")
    monkeypatch.setenv("GDAL_HTTP_MAX_RETRY", "0")
    url = cog_server.add("landing.json", _landing(cog_server.url("search")))
    cog_server.hang.add("/landing.json")
    cog_server.configure()
    with pytest.raises(RemoteTimedOut, match=r"cannot search .*landing.json.*GDAL_HTTP_TIMEOUT"):
        search_items(url, "demo")


def test_the_napari_search_form_lists_the_items_in_view_and_opens_one_lazily(
    stac_api, cog_server, s2_cogs, scene_bytes, make_napari_viewer
):
    from napari_sam3.plugin.widgets import StacSearchWidget

    viewer = make_napari_viewer()
    viewer.open(str(s2_cogs["B04"]), plugin="napari-sam3")  # the area in view: the scene
    form = StacSearchWidget(viewer)
    form.url.value, form.collections.value = stac_api.url, "demo"
    form.search()
    in_view = [line.split()[0] for line in form.items.choices]
    assert in_view == [s[0] for s in SCENES if s[3]], form.status.value  # not the far one
    form.area.value, form.dates.value = "Anywhere", "2024-06/2024-06"
    form.search()
    assert [line.split()[0] for line in form.items.choices] == ["s2_2024_06_11", "far_2024_06_20"]
    form.cloud.value = 20  # a filter this API cannot take: said, not raised
    form.search()
    assert "Filter extension" in form.status.value
    cog_server.reset_counts()
    form.items.value = [form.items.choices[0]]
    opened = form.open_selected()
    assert opened == [layer for layer in viewer.layers if layer.name.startswith("s2_2024_06_11")]
    assert [layer.name.split()[-1] for layer in opened] == list(BANDS)
    assert all(layer.multiscale and layer.data[0].shape == (768, 1536) for layer in opened)
    assert sum(cog_server.served.values()) < scene_bytes / 2  # overviews, not the scene


def _footprint_item(item_id: str, west: float, east: float) -> dict:
    box = shapely.box(west, -17.3, east, -16.0)
    return {
        "type": "Feature", "stac_version": "1.0.0", "id": item_id, "collection": "demo",
        "bbox": list(box.bounds), "geometry": shapely.geometry.mapping(box),
        "properties": {"datetime": "2024-06-01T00:00:00Z"}, "assets": {}, "links": [],
    }  # fmt: skip


def test_a_search_across_the_antimeridian_finds_what_lies_either_side(tmp_path):
    """West above east is read as crossing the antimeridian (the STAC API's own convention),
    sent as the two sides so every server reads it alike; a west above east spanning half the
    globe is two numbers swapped, refused."""
    items = [
        _footprint_item("fiji_west", 179.3, 180.0),
        _footprint_item("fiji_east", -180.0, -179.4),
        _footprint_item("greenwich", -0.5, 0.5),
        _footprint_item("east_of_fiji", -170.0, -169.0),
    ]
    with StacApiServer(tmp_path / "api", items) as api:
        across = search_items(api.url, "demo", bbox=[179.5, -17.2, -179.6, -16.1])
        assert sorted(i.id for i in across.items) == ["fiji_east", "fiji_west"]
        west_only = search_items(api.url, "demo", bbox=[179.5, -17.2, 179.9, -16.1])
        assert [i.id for i in west_only.items] == ["fiji_west"]
        with pytest.raises(InvalidInput, match="swapped"):
            search_items(api.url, "demo", bbox=[10.0, -17.2, 9.0, -16.1])

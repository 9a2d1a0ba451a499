"""Basemap tiles as input (imagery/basemap.py): a real XYZ tile server on loopback serving PNG
tiles in EPSG:3857 rendered from the shipped Sentinel-2 scene (tests/imagery/tiles.py)."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_sam3.cli import main
from napari_sam3.core.columns import BASEMAP_COLUMNS
from napari_sam3.imagery.basemap import (
    BasemapError,
    basemap_scene,
    is_basemap,
    parse_basemap,
    xyz_resolution,
    xyz_zoom,
)
from napari_sam3.imagery.raster import raster_info, read_raster

from .http_server import Fault, RangeServer
from .tiles import render_tiles

ZOOM = 13
# a window of the mosaic inside the scene's footprint: rows 256..576, columns 512..912
WINDOW = (256, 512, 576, 912)
TEMPLATE = "{z}/{x}/{y}.png"


@pytest.fixture(scope="module")
def mosaic(s2_rgb_paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiles")
    return folder, render_tiles(s2_rgb_paths, folder, ZOOM)


@pytest.fixture
def tile_server(mosaic):
    with RangeServer(mosaic[0]) as server:  # a fresh port: nothing of another test cached
        yield server


def _bbox(mosaic, window=WINDOW) -> str:
    """The window's bounds in EPSG:3857, as --bbox text."""
    r0, c0, r1, c1 = window
    t = mosaic[1].transform
    (west, north), (east, south) = t * (c0, r0), t * (c1, r1)
    return f"{west!r},{south!r},{east!r},{north!r},EPSG:3857"


def _tile_paths(mosaic, window=WINDOW) -> list[str]:
    r0, c0, r1, c1 = window
    m = mosaic[1]
    return [
        f"/{ZOOM}/{m.x0 + tx}/{m.y0 + ty}.png"
        for ty in range(r0 // 256, (r1 - 1) // 256 + 1)
        for tx in range(c0 // 256, (c1 - 1) // 256 + 1)
    ]


def _segment(source, out, *extra, tiny_repository) -> int:
    argv = ["segment", source, "--models", tiny_repository, "--precision", "fp32",
            "--prompt", "building", "--score-thr", "0", "--max-det", "5", "--tile-size", "128",
            "--out", out, "--quiet", *extra]  # fmt: skip
    return main([str(a) for a in argv])


def test_the_tiles_of_an_area_are_the_servers_pixels_on_its_grid(mosaic, tile_server):
    """A bbox in lon/lat is snapped outwards to the zoom's pixel grid: every pixel is the one
    the server sent, and the VRT is placed on the service's grid exactly."""
    from rasterio.warp import transform_bounds

    r0, c0, r1, c1 = WINDOW
    t = mosaic[1].transform  # a box 0.3 pixels inside the window's edges
    (west, north), (east, south) = t * (c0 + 0.3, r0 + 0.3), t * (c1 - 0.3, r1 - 0.3)
    bounds = transform_bounds("EPSG:3857", "EPSG:4326", west, south, east, north)
    with basemap_scene(tile_server.url(TEMPLATE), (bounds, "EPSG:4326"), zoom=ZOOM) as vrt:
        info = raster_info(vrt)
        raster = read_raster(vrt)
        folder = vrt.parent
    assert not folder.exists()  # the VRT, the description and the tile cache are gone
    assert info.crs.to_epsg() == 3857 and info.roles == ("red", "green", "blue", "alpha")
    assert info.transform == mosaic[1].at(c0, r0)
    assert (info.rows, info.cols) == (r1 - r0, c1 - c0)
    np.testing.assert_array_equal(raster.data, mosaic[1].data[:, r0:r1, c0:c1])


def test_a_basemap_run_writes_the_polygons_of_the_same_pixels_from_a_geotiff(
    mosaic, tile_server, tiny_repository, tmp_path
):
    url = tile_server.url(TEMPLATE)
    out = tmp_path / "basemap.gpkg"
    code = _segment(url, out, "--bbox", _bbox(mosaic), "--zoom", ZOOM, "--attribution",
                    "Tiles © test", tiny_repository=tiny_repository)  # fmt: skip
    assert code == 0
    local = mosaic[1].write(tmp_path / "same_pixels.tif", WINDOW)
    assert _segment(local, tmp_path / "local.gpkg", tiny_repository=tiny_repository) == 0
    a, b = gpd.read_file(out), gpd.read_file(tmp_path / "local.gpkg")
    assert a.crs.to_epsg() == 3857 == b.crs.to_epsg()
    assert len(a) == len(b) > 0
    assert set(a["service"]) == {url} and set(a["attribution"]) == {"Tiles © test"}
    assert not set(BASEMAP_COLUMNS) & set(b.columns)  # only a basemap's outputs carry them
    same = [c for c in b.columns if c not in ("source", "geometry")]
    pd.testing.assert_frame_equal(pd.DataFrame(a[same]), pd.DataFrame(b[same]))
    assert a.geometry.to_wkb().tolist() == b.geometry.to_wkb().tolist()
    served = {p for _, p, _ in tile_server.requests}
    assert served == set(_tile_paths(mosaic))  # the area's tiles, each once (the cache)
    assert len(tile_server.requests) == len(served)


def test_a_gsd_chooses_the_zoom_and_the_run_averages_its_pixels(mosaic, tile_server, tmp_path):
    gsd = 2 * xyz_resolution(ZOOM) - 1  # zoom 13 is the coarsest with pixels this fine
    assert xyz_zoom(gsd) == ZOOM
    with basemap_scene(tile_server.url(TEMPLATE), (_area(mosaic)), gsd=gsd) as vrt:
        native = raster_info(vrt)
        grid = raster_info(vrt, gsd=gsd)
    assert native.transform.a == pytest.approx(xyz_resolution(ZOOM))
    assert grid.transform.a == pytest.approx(gsd) and grid.cols < native.cols


def _area(mosaic):
    parts = _bbox(mosaic).split(",")
    return tuple(map(float, parts[:4])), parts[4]


@given(st.floats(min_value=0.01, max_value=100_000))
def test_the_zoom_of_a_gsd_is_the_coarsest_that_is_fine_enough(gsd):
    zoom = xyz_zoom(gsd)
    if 0 < zoom < 24:
        assert xyz_resolution(zoom) <= gsd * (1 + 1e-9) < xyz_resolution(zoom - 1)


def test_a_server_that_404s_half_the_tiles_fails_naming_the_service_and_writes_nothing(
    mosaic, tile_server, tiny_repository, tmp_path, capsys
):
    tiles = _tile_paths(mosaic)  # 2 x 2; the first holds the area's centre, which is served
    for path in tiles[1::2]:
        tile_server.faults[path] = [Fault("status", times=0, code=404)]
    tile_server.configure()
    out = tmp_path / "out.gpkg"
    code = _segment(tile_server.url(TEMPLATE), out, "--bbox", _bbox(mosaic), "--zoom", ZOOM,
                    tiny_repository=tiny_repository)  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert tile_server.url(TEMPLATE) in err and "404" in err and "never read as empty" in err
    assert "centre" not in err  # it failed mid-run, where the tiles are read


def test_a_204_tile_is_empty_and_its_pixels_invalid_never_black_pixels(mosaic, tile_server):
    tile = _tile_paths(mosaic)[0]
    tile_server.faults[tile] = [Fault("status", times=0, code=204)]
    tile_server.configure()
    with basemap_scene(tile_server.url(TEMPLATE), _area(mosaic), zoom=ZOOM) as vrt:
        raster = read_raster(vrt)
    r0, c0, _, _ = WINDOW
    corner = raster.data[3, : 256 - r0 % 256, : 256 - c0 % 256]
    assert (corner == 0).all()  # the empty tile: transparent
    assert raster.valid is not None and not raster.valid[0, 0] and raster.valid[-1, -1]


def test_a_wrong_template_is_a_clear_error_naming_the_url(mosaic, tile_server, tmp_path, capsys):
    url = tile_server.url("nowhere/{z}/{x}/{y}.png")
    with pytest.raises(BasemapError, match="nowhere.*404"):
        with basemap_scene(url, _area(mosaic), zoom=ZOOM):
            pass
    code = main(["segment", url, "--models", str(tmp_path), "--prompt", "building", "--bbox",
                 _bbox(mosaic), "--zoom", str(ZOOM), "--out", str(tmp_path / "x.gpkg")])  # fmt: skip
    assert code == 1 and url in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, says",
    [
        ([], "--bbox"),  # a basemap covers the world
        (["--bbox", "14.2,52.3,14.4,52.5"], "--zoom"),  # no resolution
        # the service's grid ends at the antimeridian: each side on its own, never the world
        (["--bbox", "179.5,-17.2,-179.6,-16.1", "--zoom", "12"], "179.5..180 and -180..-179.6"),
    ],
)
def test_a_basemap_without_an_area_or_a_resolution_is_refused(extra, says, tmp_path, capsys):
    url = "http://127.0.0.1:9/{z}/{x}/{y}.png"  # nothing is contacted before the refusal
    code = main(["segment", url, "--models", str(tmp_path), "--prompt", "building",
                 "--out", str(tmp_path / "x.gpkg"), *extra])  # fmt: skip
    assert code == 2 and says in capsys.readouterr().err


def test_what_names_a_basemap(tmp_path):
    assert is_basemap("https://tile.example.org/{z}/{x}/{y}.png")
    assert is_basemap("WMS:https://example.org/wms?LAYERS=ortho")
    assert not is_basemap("https://example.org/scene.tif")
    with pytest.raises(ValueError, match=r"\{z\}, \{x\} and \{y\}"):
        parse_basemap("https://tile.example.org/{z}/{x}/{row}.png")
    xml = tmp_path / "ortho.xml"
    xml.write_text("<GDAL_WMS><Service name='WMS'/></GDAL_WMS>")
    assert is_basemap(xml) and parse_basemap(str(xml)).kind == "gdal"
    assert not is_basemap(tmp_path / "other.xml")


def test_the_basemap_command_writes_a_raster_napari_opens_in_map_units(
    mosaic, tile_server, tmp_path, capsys
):
    from napari_sam3.plugin.reader import get_reader, read_layers

    out = tmp_path / "area"
    argv = ["basemap", tile_server.url(TEMPLATE), "--bbox", _bbox(mosaic), "--zoom", str(ZOOM),
            "--attribution", "Tiles © test", "--cache-mib", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    (vrt,) = out.glob("*.basemap.vrt")
    assert str(vrt) in capsys.readouterr().out
    assert "<MaxSize>1048576</MaxSize>" in (out / "service.xml").read_text()  # bounded cache
    assert get_reader(str(vrt)) is not None
    ((data, meta, kind),) = read_layers(str(vrt))
    r0, c0, r1, c1 = WINDOW
    assert kind == "image" and data.shape == (r1 - r0, c1 - c0, 3)
    np.testing.assert_array_equal(
        np.asarray(data), np.moveaxis(mosaic[1].data[:3, r0:r1, c0:c1], 0, -1)
    )
    east, north = mosaic[1].at(c0, r0) * (0.5, 0.5)  # the first pixel's centre
    assert meta["translate"] == pytest.approx((-north, east))  # (y, x) = (-northing, easting)
    assert main(argv) == 2  # the folder is in use: refused without --overwrite
    assert list(out.glob("cache/**/*"))  # the tiles read were cached there


def test_change_and_workers_refuse_a_basemap(tmp_path, capsys):
    url = "http://127.0.0.1:9/{z}/{x}/{y}.png"
    code = main(["change", url, url, "--models", str(tmp_path), "--keywords", "building",
                 "--out", str(tmp_path / "c.gpkg")])  # fmt: skip
    assert code == 2 and "napari-sam3 basemap" in capsys.readouterr().err
    code = main(["segment", url, "--models", str(tmp_path), "--prompt", "building", "--bbox",
                 "14.2,52.3,14.4,52.5", "--zoom", "12", "--workers", "2", "--out", str(tmp_path)])  # fmt: skip
    assert code == 2 and "runs in this process" in capsys.readouterr().err
    code = main(["segment", url, "--models", str(tmp_path), "--prompt", "building", "--bbox",
                 "14.2,52.3,14.4,52.5", "--zoom", "12", "--workers", "2",
                 "--out", str(tmp_path / "one.gpkg")])  # fmt: skip
    assert code == 2 and "runs in this process" in capsys.readouterr().err  # tiles on workers
    code = main(["segment", url, "--models", str(tmp_path), "--prompt", "building", "--bbox",
                 "14.2,52.3,14.4,52.5", "--zoom", "12", "--resume", "--out", str(tmp_path / "r.gpkg")])  # fmt: skip
    assert code == 2 and "napari-sam3 basemap" in capsys.readouterr().err


WMS_DESCRIPTION = """<GDAL_WMS>
  <Service name="WMS"><Version>1.1.1</Version><ServerUrl>{url}</ServerUrl><SRS>EPSG:3857</SRS>
    <ImageFormat>image/png</ImageFormat><Layers>s2</Layers></Service>
  <DataWindow><UpperLeftX>{w}</UpperLeftX><UpperLeftY>{n}</UpperLeftY><LowerRightX>{e}</LowerRightX>
    <LowerRightY>{s}</LowerRightY><SizeX>{size}</SizeX><SizeY>{size}</SizeY></DataWindow>
  <BlockSizeX>256</BlockSizeX><BlockSizeY>256</BlockSizeY><BandsCount>4</BandsCount>
</GDAL_WMS>"""


def test_a_wms_description_file_is_read_at_the_gsd_asked_of_the_server(
    mosaic, tile_server, tmp_path
):
    """A GDAL WMS description of a WMS (GetMap) serving the mosaic: its pixels at the zoom's
    resolution are the mosaic's; asked for twice that gsd, the server is asked for coarser maps."""
    from .tiles import ORIGIN

    mosaic[1].write(mosaic[0] / "wms.tif")  # what /wms renders GetMap requests from
    xml = tmp_path / "s2.xml"
    xml.write_text(WMS_DESCRIPTION.format(url=tile_server.url("wms?"), w=-ORIGIN, n=ORIGIN,
                                          e=ORIGIN, s=-ORIGIN, size=256 * 2**ZOOM))  # fmt: skip
    res = xyz_resolution(ZOOM)
    with basemap_scene(str(xml), _area(mosaic), gsd=res) as vrt:
        raster = read_raster(vrt)
    r0, c0, r1, c1 = WINDOW
    np.testing.assert_array_equal(raster.data, mosaic[1].data[:, r0:r1, c0:c1])
    assert {p for _, p, _ in tile_server.requests} == {"/wms"}  # GetMap, not the tiles
    with basemap_scene(str(xml), _area(mosaic), gsd=2 * res) as vrt:
        coarse = raster_info(vrt)
    assert (coarse.rows, coarse.cols) == ((r1 - r0) // 2, (c1 - c0) // 2)
    assert coarse.transform.a == pytest.approx(2 * res)
    with pytest.raises(ValueError, match="no pixel size of its own"):
        with basemap_scene("WMS:" + tile_server.url("wms?LAYERS=s2"), _area(mosaic)):
            pass

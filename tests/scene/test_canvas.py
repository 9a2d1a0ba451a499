"""The canvas engine's plain functions (scene/canvas.py): clicks, boxes and keywords in map
coordinates give the library's own results on the same pixels; what cannot be placed is refused."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from hypothesis import example, given
from hypothesis import strategies as st

from napari_sam3.core.errors import InvalidInput, OutOfRange, UnknownKey
from napari_sam3.gis.vector import to_geodataframe
from napari_sam3.imagery.raster import read_raster
from napari_sam3.prompts.query import Query
from napari_sam3.scene.aoi import Bbox
from napari_sam3.scene.canvas import Canvas, click_window
from napari_sam3.scene.driver import segment_with_provenance
from napari_sam3.scene.output import scene_geodataframe
from napari_sam3.scene.run import read_tile
from napari_sam3.scene.settings import SceneSettings
from napari_sam3.scene.tiles import Tile

from .conftest import write_geotiff


@pytest.fixture(scope="module")
def canvas(local_client):
    return Canvas(local_client)


def _map(opened, col: float, row: float) -> tuple[float, float]:
    return opened.info.transform * (col, row)


def _library_window(client, opened, col: float, row: float):
    """The window the library's reading gives for a click at pixel (col, row), and its
    interactive session: what a napari user segments on the same pixels."""
    size = client.image_size
    r0, c0 = click_window(col, row, opened.info.cols, opened.info.rows, size)
    tile = Tile(-1, r0, c0, min(size, opened.info.rows - r0), min(size, opened.info.cols - c0))
    prepared, _, _, _ = read_tile(client, opened.source, tile, None, opened.view)
    # the window's georeferencing as the reader gives it (a windowed read carries its own)
    return tile, read_raster(opened.source, window=tile.slices), client.interactive(prepared)


def _same_geometries(canvas, answer: dict, expected) -> None:
    """The click's candidates are the library's, best first: the first with its polygon, the
    others' polygons from Canvas.candidate."""
    listed = answer["candidates"]
    assert len(listed) == len(expected)
    assert "wkt" in listed[0] and all("wkt" not in c for c in listed[1:])
    for got, (index, row) in zip(listed, expected.iterrows(), strict=True):
        assert got["index"] == index and got["score"] == pytest.approx(float(row.iou))
        polygon = got if "wkt" in got else canvas.candidate(answer["token"], got["index"])
        assert polygon["index"] == index and polygon["score"] == got["score"]
        assert shapely.from_wkt(polygon["wkt"]).equals(row.geometry)
        assert polygon["area_m2"] == pytest.approx(float(row.area_m2))


def test_a_click_gives_the_library_candidates_on_the_same_pixels(canvas, crop_tif):
    opened = canvas.open(str(crop_tif))
    col, row = 150.5, 120.5
    answer = canvas.click(opened.key, [[*_map(opened, col, row), 1]])

    tile, window, session = _library_window(canvas.client, opened, col, row)
    frame = session.add_point([col - tile.col, row - tile.row])
    expected = to_geodataframe(frame.head(3), window)
    expected = expected[~expected.geometry.is_empty]
    _same_geometries(canvas, answer, expected)
    assert len(expected) > 1  # the other candidates' polygons are asked for too
    assert answer["candidates"][0]["score"] >= answer["candidates"][-1]["score"]
    assert answer["window"] == pytest.approx(
        [
            *_map(opened, tile.col, tile.row + tile.height),
            *_map(opened, tile.col + tile.width, tile.row),
        ]
    )

    # refining: the previous result's points, then a negative one, as the session adds them
    second = (col + 6, row + 4)
    refined = canvas.click(
        opened.key,
        [[*_map(opened, col, row), 1], [*_map(opened, *second), 0]],
        previous=answer["token"],
    )
    frame = session.add_point([second[0] - tile.col, second[1] - tile.row], positive=False)
    expected = to_geodataframe(frame.head(3), window)
    _same_geometries(canvas, refined, expected[~expected.geometry.is_empty])

    # refining the first result again (undo, then another point) starts from its prompts
    again = canvas.click(
        opened.key,
        [[*_map(opened, col, row), 1], [*_map(opened, *second), 0]],
        previous=answer["token"],
    )
    assert again["candidates"][0]["wkt"] == refined["candidates"][0]["wkt"]
    assert [canvas.candidate(again["token"], c["index"]) for c in again["candidates"][1:]] == [
        canvas.candidate(refined["token"], c["index"]) for c in refined["candidates"][1:]
    ]
    # a candidate asked of a result that is not one, or beyond the three
    with pytest.raises(UnknownKey, match="click again"):
        canvas.candidate("nothing:1", 1)
    for index in (3, -1, "1", 1.0):
        with pytest.raises(OutOfRange, match="0 is the best"):
            canvas.candidate(answer["token"], index)


def test_a_box_gives_the_library_candidates(canvas, crop_tif):
    opened = canvas.open(str(crop_tif))
    c0, r0, c1, r1 = 200.0, 100.0, 240.0, 130.0
    west, north = _map(opened, c0, r0)
    east, south = _map(opened, c1, r1)
    answer = canvas.click(opened.key, box=[west, south, east, north])

    tile, window, session = _library_window(canvas.client, opened, (c0 + c1) / 2, (r0 + r1) / 2)
    frame = session.add_box([c0 - tile.col, r0 - tile.row, c1 - tile.col, r1 - tile.row])
    expected = to_geodataframe(frame.head(3), window)
    _same_geometries(canvas, answer, expected[~expected.geometry.is_empty])


def test_clicks_that_cannot_be_placed_are_refused(canvas, crop_tif, tmp_path):
    opened = canvas.open(str(crop_tif))
    west, south, east, north = opened.describe()["bounds"]
    with pytest.raises(OutOfRange, match="lies outside the raster"):
        canvas.click(opened.key, [[west - 50, north - 50, 1]])
    with pytest.raises(UnknownKey, match="click again without it"):
        canvas.click(opened.key, [[west + 50, north - 50, 1]], previous="nothing:1")
    with pytest.raises(UnknownKey, match="open it first"):
        canvas.click("unknown", [[west + 50, north - 50, 1]])
    with pytest.raises(InvalidInput, match=r"\[x, y, 1\|0\]"):
        canvas.click(opened.key, [[west + 50, north - 50, 2]])

    # a raster whose left half is fill (nodata 0): a click there is refused, one beside is not
    data = np.full((3, 120, 160), 90, np.uint8)
    data[:, :, :80] = 0
    data[:, 40:80, 100:140] = 200
    filled = canvas.open(str(write_geotiff(tmp_path / "fill.tif", data, nodata=0)))
    with pytest.raises(InvalidInput, match="lies on fill"):
        canvas.click(filled.key, [[*_map(filled, 20.5, 60.5), 1]])
    assert canvas.click(filled.key, [[*_map(filled, 120.5, 60.5), 1]])["candidates"]


def test_a_raster_without_a_crs_is_refused(canvas, tmp_path):
    plain = write_geotiff(tmp_path / "plain.tif", np.ones((3, 20, 20), np.uint8), crs=None)
    with pytest.raises(InvalidInput, match="has no CRS"):
        canvas.open(str(plain))


def test_keywords_over_an_extent_are_the_library_segment_of_that_area(canvas, crop_tif):
    opened = canvas.open(str(crop_tif))
    west, north = _map(opened, 40, 30)
    east, south = _map(opened, 180, 150)
    extent = [west, south, east, north]
    seen = []
    answer = canvas.segment(
        opened.key, ["building"], extent=extent, score_thr=0.0, progress=lambda *a: seen.append(a)
    )

    settings = SceneSettings(aoi=Bbox(*extent, crs="EPSG:32633"))
    df = segment_with_provenance(
        canvas.client, str(crop_tif), Query(keywords=("building",), score_thr=0.0), settings
    )
    gdf = scene_geodataframe(df)
    gdf = gdf[gdf.intersects(shapely.box(*extent))]
    assert answer["count"] == len(gdf) > 0
    for got, (_, row) in zip(answer["features"], gdf.iterrows(), strict=True):
        assert shapely.from_wkt(got["wkt"]).equals(row.geometry)
        assert got["score"] == pytest.approx(float(row.score))
        assert got["keyword"] == "building"
        assert got["model_id"] == canvas.client.model_id
    assert seen and seen[-1][0] == seen[-1][1]  # every tile reported


def test_keywords_and_extents_that_cannot_run_are_refused(canvas, crop_tif):
    opened = canvas.open(str(crop_tif))
    with pytest.raises(InvalidInput, match="non-empty"):
        canvas.segment(opened.key, ["  "])
    with pytest.raises(OutOfRange, match="lies outside the scene"):
        canvas.segment(opened.key, ["building"], extent=[0, 0, 10, 10])
    with pytest.raises(InvalidInput, match="exemplar"):
        canvas.segment(opened.key, exemplars=[[0, 0, 10, 10, 3]])


@example(rows=319, cols=1, size=47, at=(0.0, 0.7734375))  # an odd window on half pixels
@given(
    rows=st.integers(1, 4000),
    cols=st.integers(1, 4000),
    size=st.integers(8, 1200),
    at=st.tuples(st.floats(0, 1, exclude_max=True), st.floats(0, 1, exclude_max=True)),
)
def test_a_click_window_holds_the_click_a_quarter_window_in(rows, cols, size, at):
    col, row = at[0] * cols, at[1] * rows
    r0, c0 = click_window(col, row, cols, rows, size)
    for start, where, length in ((r0, row, rows), (c0, col, cols)):
        end = min(start + size, length)
        assert 0 <= start <= where < end <= length
        assert end - start == min(size, length)  # whole where the raster allows
        # a quarter window of margin, except against the raster's own edges
        if start > 0:
            assert where - start >= size / 4 - 1e-9
        if end < length:
            assert end - where >= size / 4 - 1e-9


def test_a_raster_in_degrees_written_past_180_segments_its_view(canvas, s2_crop, tmp_path):
    """A raster in EPSG:4326 written past 180 (0..360, as Pacific rasters are): the map's view
    has longitudes past 180 (or across it), a map zoomed out shows more than the globe; each
    gives what the whole raster gives in that view, and a click's area is measured."""
    from rasterio.transform import from_origin

    from .. import _rasters

    data = s2_crop.data[:, :100, :150]
    path = _rasters.write_geotiff(
        tmp_path / "pacific.tif", data, from_origin(179.99, -16.0, 0.0002, 0.0002), "EPSG:4326"
    )
    opened = canvas.open(str(path))
    west, south, east, north = opened.describe()["bounds"]
    assert west < 180 < east
    whole = canvas.segment(opened.key, ["building"], score_thr=0.0)
    assert whole["count"] > 0
    polygons = [shapely.from_wkt(f["wkt"]) for f in whole["features"]]
    views = {
        "across 180": [west + 0.002, south + 0.002, east - 0.002, north - 0.002],
        "past 180": [180.005, south, east, north],
        "zoomed out": [west - 200, -120, east + 200, 120],
    }
    for name, view in views.items():
        got = canvas.segment(opened.key, ["building"], extent=view, score_thr=0.0)
        touching = [p for p in polygons if p.intersects(shapely.box(*view))]
        assert got["count"] == len(touching) > 0, name
        assert {shapely.from_wkt(f["wkt"]).wkb for f in got["features"]} <= {
            p.wkb for p in polygons
        }, name
    answer = canvas.click(opened.key, [[*_map(opened, 75.5, 50.5), 1]])
    assert (
        np.isfinite(answer["candidates"][0]["area_m2"]) and answer["candidates"][0]["area_m2"] > 0
    )

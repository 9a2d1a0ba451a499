"""Vector prompts in any CRS: exemplars from a GeoPackage in EPSG:4326 steer a raster in
EPSG:32621 (library and command line); bad vector input is a clear error."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pyogrio
import pytest
import rasterio
from pyproj import Transformer
from shapely.geometry import LineString, Polygon

from napari_sam3.prompts import vector as vp
from napari_sam3.scene.exemplars import scene_exemplar_concepts

from .conftest import UTM21, UTM21_ORIGIN

# Pixel rectangles [x1, y1, x2, y2] inside the first 112 px tile of the tiny model's grid.
BOXES = np.array([[10, 20, 50, 60], [60, 30, 100, 90]], np.float32)
TO_LONLAT = Transformer.from_crs(UTM21, "EPSG:4326", always_xy=True)


def _lonlat_polygon(box) -> Polygon:
    """The pixel box's corners in UTM 21N (10 m grid at UTM21_ORIGIN), then in lon/lat."""
    x0, y0 = UTM21_ORIGIN
    x1, y1, x2, y2 = (float(v) for v in box)
    corners = [(x0 + 10 * c, y0 - 10 * r) for c, r in ((x1, y1), (x2, y1), (x2, y2), (x1, y2))]
    return Polygon([TO_LONLAT.transform(x, y) for x, y in corners])


@pytest.fixture(scope="module")
def lonlat_gpkg(tmp_path_factory):
    gdf = gpd.GeoDataFrame(
        {"kind": ["house", "shed"], "label": [1, 1]},
        geometry=[_lonlat_polygon(b) for b in BOXES],
        crs="EPSG:4326",
    )
    path = tmp_path_factory.mktemp("vectors") / "exemplars_4326.gpkg"
    gdf.to_file(path, engine="pyogrio")
    return path


def test_gpkg_in_4326_gives_the_pixel_boxes(lonlat_gpkg, utm21_tif):
    assert pyogrio.read_info(lonlat_gpkg)["crs"] == "EPSG:4326"
    boxes, labels = vp.exemplar_boxes(lonlat_gpkg, utm21_tif)
    np.testing.assert_allclose(boxes, BOXES, atol=1e-3)
    np.testing.assert_array_equal(labels, [1, 1])


@pytest.mark.timeout(1500)  # the first model test of a session pays the shared export
def test_encode_exemplars_from_the_gpkg_equals_pixel_boxes(local_client, lonlat_gpkg, utm21_tif):
    from_vectors = local_client.encode_exemplars(utm21_tif, exemplars=lonlat_gpkg)
    from_pixels = local_client.encode_exemplars(utm21_tif, BOXES)
    other = local_client.encode_exemplars(utm21_tif, BOXES + 20)
    for name, value in from_pixels.tensors().items():
        np.testing.assert_allclose(from_vectors.tensors()[name], value, rtol=1e-5, atol=1e-6)
    assert any(
        not np.allclose(other.tensors()[n], v, atol=1e-6) for n, v in from_pixels.tensors().items()
    ), "shifted boxes should give another concept"
    a = local_client.segment(utm21_tif, exemplars=lonlat_gpkg, score_thr=0.0)
    b = local_client.segment(utm21_tif, exemplar_boxes=BOXES, score_thr=0.0)
    assert len(a) == len(b) > 0
    np.testing.assert_allclose(np.stack(a["box"]), np.stack(b["box"]), atol=1e-4)


def test_cli_exemplars_steer_a_utm21_raster(
    tmp_path, local_client, tiny_repository, lonlat_gpkg, utm21_tif, capsys
):
    """From the command line; the reference is encoded independently from the pixel boxes on
    the first tile, stretched with the scene's statistics, and applied by segment_scene."""
    from napari_sam3.cli import main
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.imagery.stretch import scene_stretch, to_model_rgb
    from napari_sam3.scene import scene_geodataframe, segment_scene

    out = tmp_path / "steered.gpkg"
    args = [
        "segment",
        str(utm21_tif),
        "--exemplars",
        str(lonlat_gpkg),
        "--models",
        str(tiny_repository),
        "--precision",
        "fp32",  # local_client's
        "--score-thr",
        "0",
        "--max-det",
        "3",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert "1 exemplar concept(s) from exemplars_4326.gpkg" in capsys.readouterr().out
    got = gpd.read_file(out)
    assert got.crs.to_epsg() == 32621

    rgb = to_model_rgb(
        read_raster(utm21_tif, window=np.s_[0:112, 0:112]), stats=scene_stretch(utm21_tif)
    )
    concept = local_client.encode_exemplars(local_client.prepare(rgb), BOXES, name="ref")
    ref = segment_scene(
        local_client, utm21_tif, concept=concept, score_thr=0.0, max_det=3, progress=False
    )
    expected = scene_geodataframe(ref, utm21_tif)
    assert len(got) == len(expected) > 0
    assert set(got["prompt_kind"]) == {"concept"}
    assert set(got["keyword"]) == {"exemplars_4326"}
    np.testing.assert_allclose(got["score"], expected["score"], rtol=1e-5)
    for g, e in zip(got.geometry, expected.geometry, strict=True):
        assert g.symmetric_difference(e).area < 1e-6 * max(e.area, 1.0)


def test_label_column_gives_negatives(tmp_path, utm21_tif):
    gdf = gpd.GeoDataFrame(
        {"is_target": ["positive", "negative"]},
        geometry=[_lonlat_polygon(b) for b in BOXES],
        crs="EPSG:4326",
    )
    boxes, labels = vp.exemplar_boxes(gdf, utm21_tif, label_column="is_target")
    np.testing.assert_array_equal(labels, [1, 0])
    with pytest.raises(ValueError, match="no column 'nope'.*is_target"):
        vp.exemplar_boxes(gdf, utm21_tif, label_column="nope")
    gdf["is_target"] = ["yes", "maybe"]
    with pytest.raises(ValueError, match="row 1: label 'maybe'"):
        vp.exemplar_boxes(gdf, utm21_tif, label_column="is_target")


def test_no_crs_needs_exemplars_crs(tmp_path, utm21_tif, tiny_repository, capsys):
    from napari_sam3.cli import main

    gdf = gpd.GeoDataFrame(geometry=[_lonlat_polygon(b) for b in BOXES])
    shp = tmp_path / "no_crs.shp"
    gdf.to_file(shp, engine="pyogrio")
    assert not shp.with_suffix(".prj").exists()
    with pytest.raises(ValueError, match="has no CRS.*--exemplars-crs"):
        vp.exemplar_boxes(shp, utm21_tif)
    boxes, _ = vp.exemplar_boxes(shp, utm21_tif, crs="EPSG:4326")
    np.testing.assert_allclose(boxes, BOXES, atol=1e-3)
    base = [
        "segment",
        str(utm21_tif),
        "--models",
        str(tiny_repository),
        "--precision",
        "fp32",
        "--quiet",
        "--out",
        str(tmp_path / "o.gpkg"),
        "--exemplars",
        str(shp),
    ]
    assert main(base) == 2
    assert "has no CRS" in capsys.readouterr().err
    assert main([*base, "--exemplars-crs", "EPSG:4326", "--max-det", "1"]) == 0


def test_all_outside_is_an_error_naming_how_many(utm21_tif):
    far = gpd.GeoDataFrame(geometry=[_lonlat_polygon(b + 5000) for b in BOXES], crs="EPSG:4326")
    with pytest.raises(ValueError, match="all 2 exemplars .* fall outside the raster"):
        vp.exemplar_boxes(far, utm21_tif)
    # partly outside: clipped to the raster
    with rasterio.open(utm21_tif) as ds:
        cols = ds.width
    edge = gpd.GeoDataFrame(
        geometry=[_lonlat_polygon([cols - 10, 5, cols + 30, 25])], crs="EPSG:4326"
    )
    boxes, _ = vp.exemplar_boxes(edge, utm21_tif)
    np.testing.assert_allclose(boxes, [[cols - 10, 5, cols, 25]], atol=1e-3)


def test_mixed_geometry_types_are_named(utm21_tif):
    poly = _lonlat_polygon(BOXES[0])
    mixed = gpd.GeoDataFrame(
        geometry=[poly, poly.centroid, LineString(poly.exterior.coords[:2]), poly.centroid],
        crs="EPSG:4326",
    )
    with pytest.raises(ValueError, match=r"2 Point, 1 LineString"):
        vp.exemplar_boxes(mixed, utm21_tif)
    # points make sense as clicks
    points = mixed[mixed.geom_type == "Point"]
    xy, labels = vp.interactive_points(points, utm21_tif)
    np.testing.assert_allclose(xy, [[30, 40], [30, 40]], atol=0.01)
    np.testing.assert_array_equal(labels, [1, 1])
    with pytest.raises(ValueError, match="1 Polygon"):
        vp.interactive_points(mixed.iloc[:2], utm21_tif)


def test_corrupt_file_is_named(tmp_path, utm21_tif):
    bad = tmp_path / "broken.gpkg"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    with pytest.raises(ValueError, match="cannot read vector file .*broken.gpkg"):
        vp.exemplar_boxes(bad, utm21_tif)
    with pytest.raises(FileNotFoundError, match="missing.gpkg"):
        vp.exemplar_boxes(tmp_path / "missing.gpkg", utm21_tif)


def test_array_image_is_refused_with_vector_exemplars(local_client, lonlat_gpkg):
    with pytest.raises(TypeError, match="must be georeferenced"):
        local_client.segment(np.zeros((50, 50, 3), np.uint8), exemplars=lonlat_gpkg)


def test_geoparquet_exemplars(tmp_path, utm21_tif):
    gdf = gpd.GeoDataFrame(geometry=[_lonlat_polygon(b) for b in BOXES], crs="EPSG:4326")
    path = tmp_path / "ex.parquet"
    gdf.to_crs(3857).to_parquet(path)
    boxes, _ = vp.exemplar_boxes(path, utm21_tif)
    # web mercator round trip: the box bounds are those of the reprojected corners
    np.testing.assert_allclose(boxes, BOXES, atol=0.05)


def test_scene_exemplar_concepts_read_tiles_as_the_scene_run_does(
    local_client, lonlat_gpkg, utm21_tif, tmp_path
):
    """Exemplar tiles are read like every scene tile: the scene's one stretch, nodata zeroed,
    the same tile-size check."""
    from napari_sam3.imagery.stretch import scene_stretch, to_model_rgb

    with rasterio.open(utm21_tif) as src:
        data, profile = src.read(), src.profile
    data[:, :, :40] = 0  # nodata in the exemplars' tile (left of both boxes)
    profile.update(nodata=0)
    holed = tmp_path / "holed.tif"
    with rasterio.open(holed, "w", **profile) as dst:
        dst.write(data)

    (concept,) = scene_exemplar_concepts(local_client, [holed], lonlat_gpkg)
    # by hand: the first tile, the whole scene's stretch, nodata pixels black
    size = local_client.image_size
    stats = scene_stretch(holed, nodata=0)
    window = data[:, :size, :size]
    rgb = to_model_rgb(window, stats=stats, nodata=0)
    rgb[(window == 0).all(axis=0)] = 0
    expected = local_client.encode_exemplars(local_client.prepare(rgb), BOXES)
    for name, value in expected.tensors().items():
        np.testing.assert_allclose(concept.tensors()[name], value, rtol=1e-5, atol=1e-6)

    with pytest.raises(ValueError, match="tile_size"):
        scene_exemplar_concepts(local_client, [holed], lonlat_gpkg, tile_size=4)


def test_scene_exemplar_concepts_outside_every_scene_is_an_error(
    local_client, lonlat_gpkg, s2_scene_tif
):
    with pytest.raises(vp.ExemplarsOutside, match="fall outside every raster given"):
        scene_exemplar_concepts(local_client, [s2_scene_tif], lonlat_gpkg)

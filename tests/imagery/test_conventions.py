"""Imagery as analysts get it, each convention written as a real file with rasterio from the
shipped Sentinel-2 crop, and the model's input itself checked: valid pixels span the stretch,
fill reaches the model as 0, channels are R, G, B as the file declares them, placement in the
CRS. The rules behind the cases are tested on generated inputs in test_validity_rules.py."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import rasterio
from rasterio.control import GroundControlPoint
from rasterio.enums import ColorInterp
from rasterio.transform import Affine

from napari_sam3.imagery.raster import pixel_metres, raster_info, read_raster
from napari_sam3.imagery.stretch import model_input
from napari_sam3.scene.view import describe, scene_view

MIN_LEVELS = 200  # grey levels the valid pixels of the model's input must span


@pytest.fixture(scope="module")
def scene(s2_crop):
    """The crop as (bands, rows, cols) uint16 and a collar: the outside of a tilted footprint,
    as a Landsat L1 scene has it (16 % of the pixels here)."""
    data = s2_crop.data.copy()
    _, rows, cols = data.shape
    yy, xx = np.mgrid[:rows, :cols]
    slant = rows * 0.45
    collar = (xx + yy < slant) | (xx - yy > cols - slant) | (yy - xx > rows - slant)
    collar |= xx + yy > rows + cols - slant
    return data, collar, s2_crop


def _write(path, data, crop, **profile):
    count = data.shape[0]
    options = dict(driver="GTiff", count=count, height=data.shape[1], width=data.shape[2])
    options.update(dtype=str(data.dtype), crs=crop.crs, transform=crop.transform)
    options.update(profile)
    colorinterp = options.pop("colorinterp", None)
    descriptions = options.pop("descriptions", None)
    mask = options.pop("mask", None)
    with rasterio.open(path, "w", **options) as ds:
        ds.write(data)
        if colorinterp:
            ds.colorinterp = colorinterp
        if descriptions:
            for i, text in enumerate(descriptions, start=1):
                ds.set_band_description(i, text)
        if mask is not None:
            ds.write_mask(mask)
    return path


def _levels(rgb, invalid):
    valid = rgb[~invalid] if invalid is not None else rgb.reshape(-1, 3)
    return [int(valid[:, c].max()) - int(valid[:, c].min()) for c in range(3)]


def _said(call):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in said]


# -- fill that is not flagged -------------------------------------------------------------------
@pytest.mark.parametrize("fill", [0, -9999, 65535])
def test_unflagged_fill_is_found_said_once_and_never_seen(scene, tmp_path, fill):
    data, collar, crop = scene
    values = (data / 10000).astype("float32") if fill < 0 else data.copy()  # reflectance: floats
    values[:, collar] = fill
    path = _write(tmp_path / "collar.tif", values, crop)
    (rgb, invalid), said = _said(lambda: model_input(read_raster(path)))
    assert len(said) == 1 and f"is {fill} in every band and not flagged" in said[0], said
    assert "--nodata none" in said[0]
    np.testing.assert_array_equal(invalid, collar)
    assert not rgb[collar].any(), "fill reaches the model as 0"
    assert min(_levels(rgb, invalid)) >= MIN_LEVELS
    # kept as image when the analyst says so: then the valid pixels are squeezed
    (kept, none), said = _said(lambda: model_input(read_raster(path), nodata="none"))
    assert none is None and not said
    assert min(_levels(kept, None)) >= MIN_LEVELS  # the collar sits at one end of the stretch
    assert np.mean(kept[~collar]) != pytest.approx(np.mean(rgb[~collar]), abs=5)


def test_a_flagged_nodata_needs_every_band(scene, tmp_path):
    """As GDAL's dataset mask: a pixel is nodata only when every band holds the value, so a dark
    pixel with one band at 0 stays in the image."""
    data, collar, crop = scene
    values = data.copy()
    values[:, collar] = 0
    values[2, 5:10, 200:260] = 0  # blue alone at 0 inside the footprint
    path = _write(tmp_path / "nodata.tif", values, crop, nodata=0)
    (rgb, invalid), said = _said(lambda: model_input(read_raster(path)))
    assert not said  # flagged: nothing inferred, nothing said
    np.testing.assert_array_equal(invalid, collar)
    assert rgb[5:10, 200:260, 0].any()


def test_nan_and_hot_pixels(scene, tmp_path):
    data, collar, crop = scene
    values = data.astype("float32")
    values[:, collar] = np.nan
    hot = np.zeros(collar.shape, bool)
    hot[150:153, 150:153] = True
    values[:, hot] = 3.0e38  # saturated: percentiles keep them from squeezing the rest
    path = _write(tmp_path / "nan.tif", values, crop)
    rgb, invalid = model_input(read_raster(path))
    np.testing.assert_array_equal(invalid, collar)
    assert min(_levels(rgb, invalid | hot)) >= MIN_LEVELS and (rgb[hot] == 255).all()


@pytest.mark.parametrize("bits", [12, 16])
def test_12_and_16_bit_data_span_the_stretch(scene, tmp_path, bits):
    data, collar, crop = scene
    values = (data.astype(np.float64) / data.max() * (2**bits - 1)).astype("uint16")
    path = _write(tmp_path / f"b{bits}.tif", values, crop)
    rgb, invalid = model_input(read_raster(path))
    assert invalid is None and min(_levels(rgb, None)) >= MIN_LEVELS


# -- masks: alpha, internal, side-car ------------------------------------------------------------
def _as_uint8(data):
    """Each band stretched to uint8, as a photo-like product ships."""
    lo, hi = np.percentile(data, (2, 98), axis=(-2, -1), keepdims=True)
    return np.clip((data - lo) / (hi - lo) * 255, 0, 255).astype("uint8")


def test_alpha_marks_the_outside_and_is_never_a_colour(scene, tmp_path):
    data, collar, crop = scene
    rgb8 = _as_uint8(data)
    rgb8[:, collar] = 255  # white outside the footprint, as orthomosaics export it
    alpha = np.where(collar, 0, 255).astype("uint8")[np.newaxis]
    path = _write(tmp_path / "rgba.tif", np.concatenate([rgb8, alpha]), crop, photometric="RGB",
                  alpha="YES")  # fmt: skip
    raster = read_raster(path)
    assert raster.roles == ("red", "green", "blue", "alpha")
    rgb, invalid = model_input(raster)
    np.testing.assert_array_equal(invalid, collar)
    assert not rgb[collar].any()
    np.testing.assert_array_equal(rgb[~collar], np.moveaxis(rgb8, 0, -1)[~collar])


@pytest.mark.parametrize("where", ["internal", "side-car"])
def test_mask_bands_mark_the_outside(scene, tmp_path, where):
    data, collar, crop = scene
    rgb8 = _as_uint8(data)
    rgb8[:, collar] = 255
    mask = np.where(collar, 0, 255).astype("uint8")
    options = dict(compress="JPEG", photometric="YCBCR", tiled=True, blockxsize=64, blockysize=64)
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK=where == "internal"):
        path = _write(tmp_path / "jpeg.tif", rgb8, crop, mask=mask, **options)
    assert (tmp_path / "jpeg.tif.msk").exists() == (where == "side-car")
    rgb, invalid = model_input(read_raster(path))
    np.testing.assert_array_equal(invalid, collar)
    assert not rgb[collar].any() and min(_levels(rgb, invalid)) >= MIN_LEVELS - 20  # JPEG


# -- band roles ----------------------------------------------------------------------------------
def test_declared_blue_green_red_reaches_the_model_as_red_green_blue(scene, tmp_path, local_client):
    data, _, crop = scene
    bgr = data[::-1].copy()
    path = _write(tmp_path / "bgr.tif", bgr, crop,
                  colorinterp=[ColorInterp.blue, ColorInterp.green, ColorInterp.red])  # fmt: skip
    rgb, _ = model_input(read_raster(path))
    reference, _ = model_input(read_raster(_write(tmp_path / "rgb.tif", data, crop)))
    np.testing.assert_array_equal(rgb, reference)
    np.testing.assert_array_equal(local_client.prepare(path).rgb, reference)
    # bands the analyst chose are taken in the order chosen, whatever the file declares
    asked, _ = model_input(read_raster(path, bands=(1, 2, 3)), bands=(1, 2, 3))
    np.testing.assert_array_equal(local_client.prepare(path, bands=(1, 2, 3)).rgb, asked)
    np.testing.assert_array_equal(asked, reference[..., ::-1])


def test_band_descriptions_name_the_colours(scene, tmp_path):
    data, _, crop = scene
    nir = (data[0] // 2 + 100)[np.newaxis]
    stack = np.concatenate([nir, data[::-1]])  # nir, blue, green, red
    path = _write(tmp_path / "named.tif", stack, crop, descriptions=["nir", "blue", "green", "red"])
    rgb, _ = model_input(read_raster(path))
    reference, _ = model_input(read_raster(_write(tmp_path / "rgb.tif", data, crop)))
    np.testing.assert_array_equal(rgb, reference)


def test_four_bands_are_rgba_only_when_the_fourth_says_alpha(scene, tmp_path):
    data, _, crop = scene
    rgb8 = _as_uint8(data)
    nir = _as_uint8(data[0] // 2)[np.newaxis]
    bgrn = np.concatenate([rgb8[::-1], nir])
    interp = [ColorInterp.blue, ColorInterp.green, ColorInterp.red, ColorInterp.undefined]
    declared = _write(tmp_path / "bgrn.tif", bgrn, crop, colorinterp=interp)
    rgb, invalid = model_input(read_raster(declared))
    np.testing.assert_array_equal(rgb, np.moveaxis(rgb8, 0, -1))  # NIR dropped, not "alpha"
    assert invalid is None
    # gray + 3 undefined: nothing declared
    plain = _write(tmp_path / "plain.tif", bgrn, crop, photometric="MINISBLACK")
    with pytest.raises(
        ValueError, match=r"has 4 bands \(1 band_1 \(gray\), 2 band_2, .*\); choose 3 for RGB"
    ):
        model_input(read_raster(plain))
    rgb, _ = model_input(read_raster(plain), bands=(3, 2, 1))  # the analyst's choice
    np.testing.assert_array_equal(rgb, np.moveaxis(rgb8, 0, -1))


def test_a_palette_is_expanded_to_its_colours(scene, tmp_path):
    data, _, crop = scene
    indices = (_as_uint8(data[0]) // 64).astype("uint8")[np.newaxis]  # 4 classes
    colours = {
        0: (0, 0, 255, 255),
        1: (0, 200, 0, 255),
        2: (250, 250, 0, 255),
        3: (90, 60, 30, 255),
    }
    path = tmp_path / "classes.tif"
    with rasterio.open(path, "w", driver="GTiff", count=1, height=indices.shape[1],
                       width=indices.shape[2], dtype="uint8", crs=crop.crs,
                       transform=crop.transform) as ds:  # fmt: skip
        ds.write(indices)
        ds.write_colormap(1, colours)
    raster = read_raster(path)
    assert raster.roles == ("red", "green", "blue") and raster.shape[0] == 3
    rgb, invalid = model_input(raster)
    expected = np.array([c[:3] for c in colours.values()], np.uint8)[indices[0]]
    assert invalid is None
    np.testing.assert_array_equal(rgb, expected)
    # a one-band raster without a palette stays grey
    grey = _write(tmp_path / "grey.tif", indices, crop)
    rgb, _ = model_input(read_raster(grey))
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()


# -- placement -----------------------------------------------------------------------------------
def _gcp_file(path, data, crop, crs):
    """``data`` placed by four GCPs only (no geotransform): the crop's own corners."""
    _, rows, cols = data.shape
    t = crop.transform
    corners = [(0, 0), (0, cols), (rows, 0), (rows, cols)]
    gcps = [GroundControlPoint(r, c, *(t * (c, r))) for r, c in corners]
    with (
        warnings.catch_warnings(),
        rasterio.open(
            path, "w", driver="GTiff", count=3, height=rows, width=cols, dtype=str(data.dtype)
        ) as ds,  # fmt: skip
    ):
        ds.write(data)
        ds.gcps = (gcps, crs)
    return path


def test_gcp_only_rasters_are_warped_into_their_crs(scene, tmp_path):
    data, _, crop = scene
    path = _gcp_file(tmp_path / "gcp.tif", data, crop, crop.crs)
    info = raster_info(path)
    assert info.crs == crop.crs and "ground control points" in info.placement
    assert info.transform.b == 0 and info.transform.d == 0  # north-up
    # the grid covers the same ground as the crop (GDAL may choose a slightly different step)
    left, top = info.transform * (0, 0)
    right, bottom = info.transform * (info.cols, info.rows)
    c_left, c_top = crop.transform * (0, 0)
    c_right, c_bottom = crop.transform * (crop.shape[2], crop.shape[1])
    step = abs(crop.transform.a)
    for a, b in [(left, c_left), (top, c_top), (right, c_right), (bottom, c_bottom)]:
        assert abs(a - b) <= 2 * step
    rgb, invalid = model_input(read_raster(path))
    assert min(_levels(rgb, invalid)) >= MIN_LEVELS


def test_rpc_only_rasters_are_refused_with_the_command(scene, tmp_path):
    data, _, _ = scene
    from rasterio.rpc import RPC

    rpc = RPC(height_off=0, height_scale=1, lat_off=52.5, lat_scale=0.1, line_den_coeff=[1] + [0] * 19,
              line_num_coeff=[0, 0, -1] + [0] * 17, line_off=150, line_scale=150, long_off=12.6,
              long_scale=0.1, samp_den_coeff=[1] + [0] * 19, samp_num_coeff=[0, 1] + [0] * 18,
              samp_off=210, samp_scale=210)  # fmt: skip
    rpcs = tmp_path / "rpc.tif"
    with warnings.catch_warnings(), rasterio.open(rpcs, "w", driver="GTiff", count=3,
                                                  height=data.shape[1], width=data.shape[2],
                                                  dtype="uint16") as ds:  # fmt: skip
        ds.write(data)
        ds.rpcs = rpc
    with pytest.raises(ValueError, match="gdalwarp -rpc"):
        raster_info(rpcs)


def test_a_rotated_raster_reports_its_true_pixel_size(scene, tmp_path):
    data, _, crop = scene
    angle = 30.0
    t = crop.transform * Affine.rotation(angle)
    path = _write(tmp_path / "rotated.tif", data, crop, transform=t)
    info = raster_info(path)
    assert info.transform.b != 0
    assert pixel_metres(info) == pytest.approx(abs(crop.transform.a))
    assert abs(info.transform.a) < abs(crop.transform.a) * math.cos(math.radians(angle)) + 1e-6


# -- what the model sees, said ------------------------------------------------------------------
def test_info_says_what_the_model_sees_and_writes_its_view(scene, tmp_path):
    data, collar, crop = scene
    values = data.copy()
    values[:, collar] = 0
    path = _write(tmp_path / "collar.tif", values, crop)
    preview = tmp_path / "view.png"
    lines = describe(path, tile_size=32, preview=preview)
    text = "\n".join(lines)
    share = 1 - collar.mean()
    assert f"valid pixels: {share:.1%} (unflagged fill 0 in every band (inferred))" in text
    assert "3 bands in file order as R, G, B" in text and "EPSG:32633" in text
    assert "treated as fill" in text
    tiles = next(line for line in lines if line.startswith("tiles:"))
    assert " skipped (no valid pixel)" in tiles and not tiles.endswith(
        " 0 skipped (no valid pixel)"
    )
    from PIL import Image

    picture = np.asarray(Image.open(preview))
    assert picture.shape == (*collar.shape, 3)
    assert not picture[collar].any() and min(_levels(picture, collar)) >= MIN_LEVELS
    with pytest.raises(FileExistsError):
        describe(path, tile_size=32, preview=preview)
    view = scene_view(path, raster_info(path), warn=False)
    assert view.nodata == 0 and view.valid_share == pytest.approx(share, abs=1e-9)
    assert view.summary().endswith(
        f"{share:.0%} valid (unflagged fill 0 in every band (inferred)); 0 inferred as fill"
    )


# -- through a scene run and the command line ----------------------------------------------------
@pytest.fixture(scope="module")
def padded(scene, tmp_path_factory):
    """The collared crop inside a wider frame of unflagged 0 (130 px left, 20 px right): some
    tiles of 112 px see only fill."""
    data, collar, crop = scene
    _, rows, cols = data.shape
    frame = np.zeros((3, rows, cols + 150), data.dtype)
    frame[:, :, 130 : 130 + cols] = np.where(collar, 0, data)
    fill = np.ones((rows, cols + 150), bool)
    fill[:, 130 : 130 + cols] = collar
    transform = crop.transform * Affine.translation(-130, 0)
    path = tmp_path_factory.mktemp("padded") / "padded.tif"
    return _write(path, frame, crop, transform=transform), fill, crop


def test_a_scene_run_skips_fill_and_no_detection_touches_it(padded, local_client):
    from napari_sam3.scene.output import scene_geodataframe
    from napari_sam3.scene.run import segment_scene

    path, fill, crop = padded
    with pytest.warns(UserWarning, match="is 0 in every band and not flagged") as said:
        frame = segment_scene(local_client, path, "building", score_thr=0.0, tile_size=112,
                              progress=False)  # fmt: skip
    assert len([w for w in said if "not flagged" in str(w.message)]) == 1
    view = frame.attrs["view"]
    assert view.nodata == 0 and view.fill is not None
    only_fill = [t for t in frame.attrs["tiles"] if fill[t.slices].all()]
    assert only_fill and frame.attrs["skipped_tiles"] == len(only_fill)
    assert len(frame) > 0
    for mask in frame["mask"]:
        r, c, pixels = mask.crop()
        assert not (pixels & fill[r : r + pixels.shape[0], c : c + pixels.shape[1]]).any()
    polygons = scene_geodataframe(frame)
    assert polygons.crs == crop.crs


def test_info_on_the_command_line(padded, tmp_path, capsys):
    from napari_sam3.cli import main

    path, fill, _ = padded
    png = tmp_path / "view.png"
    assert main(["info", str(path), "--tile-size", "112", "--preview", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"valid pixels: {1 - fill.mean():.1%} (unflagged fill 0 in every band" in out
    assert png.exists() and "the model's view" in out
    assert main(["info", str(path), "--nodata", "none", "--tile-size", "112"]) == 0
    assert "valid pixels: 100.0% (no nodata value (--nodata none))" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["info", str(path), "--nodata", "zero"])
    assert "nodata is a number such as 0 or -9999, or 'none'" in capsys.readouterr().err


def test_the_napari_reader_shows_what_the_model_sees(scene, tmp_path):
    from napari_sam3.plugin.reader import raster_layers
    from napari_sam3.scene.view import scene_view

    data, collar, crop = scene
    bgr8 = _as_uint8(data)[::-1].copy()
    interp = [ColorInterp.blue, ColorInterp.green, ColorInterp.red]
    path = _write(tmp_path / "bgr8.tif", bgr8, crop, colorinterp=interp)
    ((rgb, kwargs, _),) = raster_layers(read_raster(path))
    assert kwargs["rgb"] is True
    np.testing.assert_array_equal(rgb, np.moveaxis(bgr8[::-1], 0, -1))

    values = data.copy()
    values[:, collar] = 0
    path = _write(tmp_path / "collar.tif", values, crop)
    with pytest.warns(UserWarning, match="not flagged as nodata"):
        layers = raster_layers(read_raster(path))
    view = scene_view(path, raster_info(path), warn=False)
    for (_, kwargs, _), low, high in zip(layers, view.stats.low, view.stats.high, strict=True):
        assert kwargs["metadata"]["nodata"] == 0
        assert kwargs["contrast_limits"] == pytest.approx((low, high))


def test_a_nodata_that_leaves_nothing_is_refused_with_what_to_do(scene, tmp_path):
    data, _, crop = scene
    white = np.full_like(data[:, :40, :40], 255).astype("uint8")
    path = _write(tmp_path / "white.tif", white, crop)
    with pytest.raises(
        ValueError, match=r"white.tif has no valid pixel \(nodata 255 in every band"
    ):
        scene_view(path, raster_info(path), nodata=255)
    assert scene_view(path, raster_info(path), nodata=0).valid_share == 1.0

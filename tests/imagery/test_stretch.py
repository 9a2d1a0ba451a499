"""to_model_rgb / compute_stretch / scene_stretch: values, layouts, robustness and bad input."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from napari_sam3.imagery.raster import Raster, read_raster
from napari_sam3.imagery.stretch import StretchStats, compute_stretch, scene_stretch, to_model_rgb


def _expected_stretch(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Reference stretch written out directly: (v - low) / (high - low) * 255, rounded, clipped."""
    return np.clip(np.rint((values.astype(np.float64) - low) / (high - low) * 255), 0, 255)


# ----------------------------------------------------------------------------- percentiles


@pytest.mark.filterwarnings("ignore:.*mid-grey:UserWarning")
@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from([np.uint16, np.int16, np.uint8, np.int8]),
        shape=hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=40),
    ),
    st.floats(0, 49),
    st.floats(51, 100),
)
def test_integer_percentiles_are_exact(band, p_low, p_high):
    stats = compute_stretch(band, percentiles=(p_low, p_high))
    expected = np.percentile(band.astype(np.float64), [p_low, p_high])
    np.testing.assert_allclose([stats.low[0], stats.high[0]], expected, rtol=1e-12, atol=1e-9)


def test_uint16_nodata_is_excluded():
    rng = np.random.default_rng(0)
    band = rng.integers(1, 4096, size=(200, 300), dtype=np.uint16)
    band[:40] = 0
    stats = compute_stretch(band, nodata=0)
    expected = np.percentile(band[band != 0], [2, 98])
    assert (stats.low[0], stats.high[0]) == pytest.approx(tuple(expected))
    # Without nodata, the zeros drag the low percentile down to 0.
    assert compute_stretch(band).low[0] == 0


@pytest.mark.parametrize(("dtype", "nodata"), [(np.uint16, 65535), (np.float32, 9999.0)])
def test_nodata_above_the_range_becomes_0_not_255(dtype, nodata):
    band = np.arange(1, 401).reshape(20, 20).astype(dtype)
    band[:2] = nodata
    rgb = to_model_rgb(band, nodata=nodata)
    assert (rgb[:2] == 0).all()
    assert rgb[2:].max() == 255
    assert compute_stretch(band, nodata=nodata).high[0] < 400


def test_int16_with_negative_values_and_nodata():
    rng = np.random.default_rng(1)
    band = rng.integers(-3000, 3000, size=(150, 120)).astype(np.int16)
    band[::7] = -9999
    stats = compute_stretch(band, nodata=-9999, percentiles=(5, 95))
    expected = np.percentile(band[band != -9999], [5, 95])
    assert (stats.low[0], stats.high[0]) == pytest.approx(tuple(expected))
    rgb = to_model_rgb(band, nodata=-9999, percentiles=(5, 95))
    assert (rgb[::7] == 0).all()
    valid = band != -9999
    np.testing.assert_array_equal(
        rgb[..., 0][valid], _expected_stretch(band[valid], *expected).astype(np.uint8)
    )


def test_float_reflectance_with_nan_small_is_exact_large_is_close():
    rng = np.random.default_rng(2)
    small = rng.gamma(2.0, 0.05, size=(300, 400)).astype(np.float32)
    small[:20] = np.nan
    stats = compute_stretch(small)
    assert (stats.low[0], stats.high[0]) == pytest.approx(
        tuple(np.nanpercentile(small, [2, 98])), rel=1e-6
    )
    # Larger than the sample budget: a strided subsample, close to the exact figure.
    large = rng.gamma(2.0, 0.05, size=(2500, 2500)).astype(np.float32)
    large[rng.random(large.shape) < 0.1] = np.nan
    approx = compute_stretch(large)
    exact = np.nanpercentile(large, [2, 98])
    assert approx.low[0] == pytest.approx(exact[0], rel=0.02)
    assert approx.high[0] == pytest.approx(exact[1], rel=0.02)


def test_hot_pixels_barely_move_the_stretch():
    rng = np.random.default_rng(3)
    band = np.clip(rng.normal(1500, 400, size=(1000, 1000)), 0, 4095).astype(np.uint16)
    clean = compute_stretch(band)
    hot = band.copy()
    hot.ravel()[rng.choice(hot.size, 100, replace=False)] = 65535  # 0.01 % saturated pixels
    dirty = compute_stretch(hot)
    span = clean.high[0] - clean.low[0]
    assert abs(dirty.high[0] - clean.high[0]) < 0.01 * span
    assert abs(dirty.low[0] - clean.low[0]) < 0.01 * span
    rgb_clean, rgb_hot = to_model_rgb(band), to_model_rgb(hot)
    untouched = hot == band
    diff = np.abs(rgb_clean[untouched].astype(int) - rgb_hot[untouched].astype(int))
    assert diff.max() <= 1
    assert (rgb_hot[~untouched] == 255).all()


# ----------------------------------------------------------------------------- the mapping


def test_stretch_maps_percentiles_to_0_and_255_monotonically():
    band = np.arange(10000, dtype=np.uint16).reshape(100, 100) * 3
    rgb = to_model_rgb(band)
    low, high = np.percentile(band, [2, 98])
    out = rgb[..., 0].ravel()
    assert (out[band.ravel() <= low] == 0).all()
    assert (out[band.ravel() >= high] == 255).all()
    assert (np.diff(out.astype(int)) >= 0).all()
    np.testing.assert_array_equal(out, _expected_stretch(band.ravel(), low, high))
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()


def test_float_nan_and_inf():
    band = np.linspace(0.0, 1.0, 400, dtype=np.float32).reshape(20, 20)
    band[0, 0] = np.nan
    band[0, 1] = np.inf
    band[0, 2] = -np.inf
    rgb = to_model_rgb(band, percentiles=(0, 100))
    assert rgb[0, 0, 0] == 0
    assert rgb[0, 1, 0] == 255
    assert rgb[0, 2, 0] == 0
    assert rgb[-1, -1, 0] == 255


def test_uint8_passes_through_unchanged():
    rng = np.random.default_rng(4)
    rgb = rng.integers(0, 256, size=(30, 40, 3), dtype=np.uint8)
    out = to_model_rgb(rgb)
    np.testing.assert_array_equal(out, rgb)
    assert not np.shares_memory(out, rgb)
    np.testing.assert_array_equal(to_model_rgb(np.moveaxis(rgb, -1, 0)), rgb)
    rgba = np.concatenate([rgb, np.full((30, 40, 1), 7, np.uint8)], axis=-1)
    np.testing.assert_array_equal(to_model_rgb(rgba), rgb)
    gray = rgb[..., 1]
    np.testing.assert_array_equal(to_model_rgb(gray), np.stack([gray] * 3, axis=-1))


def test_bands_first_and_bands_last_agree():
    rng = np.random.default_rng(5)
    first = rng.integers(0, 4096, size=(3, 50, 70), dtype=np.uint16)
    last = np.moveaxis(first, 0, -1)
    a, b = to_model_rgb(first), to_model_rgb(last)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (50, 70, 3) and a.dtype == np.uint8
    for c in range(3):
        low, high = np.percentile(first[c], [2, 98])
        np.testing.assert_array_equal(a[..., c], _expected_stretch(first[c], low, high))


def test_ambiguous_shape_needs_channel_axis():
    arr = np.arange(36, dtype=np.uint16).reshape(3, 4, 3)
    with pytest.raises(ValueError, match="channel_axis"):
        to_model_rgb(arr)
    first = to_model_rgb(arr, channel_axis=0)
    last = to_model_rgb(arr, channel_axis=-1)
    assert first.shape == (4, 3, 3) and last.shape == (3, 4, 3)
    np.testing.assert_array_equal(to_model_rgb(np.moveaxis(arr, -1, 0), channel_axis=0), last)


def test_multispectral_needs_a_triplet():
    rng = np.random.default_rng(6)
    cube = rng.integers(0, 4096, size=(13, 40, 60), dtype=np.uint16)
    with pytest.raises(ValueError, match=r"13 bands; choose 3 .*bands="):
        to_model_rgb(cube)
    with pytest.raises(ValueError, match="4 bands"):
        to_model_rgb(cube[:4])  # 4 non-uint8 bands: not RGBA, order unknown
    picked = to_model_rgb(cube, bands=(4, 3, 2))
    np.testing.assert_array_equal(picked, to_model_rgb(cube[[3, 2, 1]]))
    with pytest.raises(ValueError, match="2 bands"):
        to_model_rgb(cube, bands=(4, 3))
    with pytest.raises(ValueError, match="1-based"):
        to_model_rgb(cube, bands=(0, 1, 2))
    with pytest.raises(ValueError, match="has no band names"):
        to_model_rgb(cube, bands=("B04", "B03", "B02"))


def test_raster_with_band_names_and_nodata():
    rng = np.random.default_rng(7)
    data = rng.integers(1, 4096, size=(4, 30, 40), dtype=np.uint16)
    data[:, :3] = 0
    raster = Raster(data, None, None, 0, ("B02", "B03", "B04", "B08"), None)  # type: ignore[arg-type]
    by_name = to_model_rgb(raster, bands=("B04", "B03", "B02"))
    by_index = to_model_rgb(data, bands=(3, 2, 1), nodata=0)
    np.testing.assert_array_equal(by_name, by_index)
    assert (by_name[:3] == 0).all()
    stats = compute_stretch(raster, bands=("B04", "B03", "B02"))
    assert stats.band_names == ("B04", "B03", "B02")
    with pytest.raises(ValueError, match=r"computed for bands \['B04', 'B03', 'B02'\]"):
        to_model_rgb(raster, bands=("B08", "B03", "B02"), stats=stats)


def test_tiles_with_shared_stats_match_the_whole_image():
    rng = np.random.default_rng(8)
    scene = rng.integers(0, 4096, size=(3, 120, 160), dtype=np.uint16)
    scene[0, :60] //= 4  # tiles really differ, so per-tile stretches would not match
    stats = compute_stretch(scene)
    whole = to_model_rgb(scene, stats=stats)
    for r in (0, 60):
        for c in (0, 80):
            tile = to_model_rgb(scene[:, r : r + 60, c : c + 80], stats=stats)
            np.testing.assert_array_equal(tile, whole[r : r + 60, c : c + 80])
    assert not np.array_equal(to_model_rgb(scene[:, :60, :80]), whole[:60, :80])


def test_stats_are_json_serialisable():
    stats = compute_stretch(np.arange(600, dtype=np.uint16).reshape(3, 10, 20))
    back = StretchStats.from_dict(json.loads(json.dumps(stats.to_dict())))
    assert back == stats
    with pytest.raises(ValueError, match="low and one high"):
        StretchStats(low=(1.0, 2.0), high=(3.0,))
    with pytest.raises(ValueError, match="low <= high"):
        StretchStats(low=(5.0,), high=(3.0,))
    with pytest.raises(ValueError, match="not a StretchStats"):
        StretchStats.from_dict({"lo": [1]})


def test_stats_channel_count_must_match():
    band = np.arange(100, dtype=np.uint16).reshape(10, 10)
    three = StretchStats(low=(0, 0, 0), high=(9, 9, 9))
    with pytest.raises(ValueError, match="stats has 3 channel"):
        to_model_rgb(band, stats=three)


# ----------------------------------------------------------------------------- real scene


def test_sentinel2_true_colour(s2_rgb_raster):
    rgb = to_model_rgb(s2_rgb_raster)
    assert rgb.shape == (768, 1536, 3) and rgb.dtype == np.uint8
    for c in range(3):
        band = s2_rgb_raster.data[c]
        low, high = np.percentile(band, [2, 98])
        np.testing.assert_array_equal(rgb[..., c], _expected_stretch(band, low, high))
        # About 2 % of the pixels clip at each end (a little more where values tie).
        assert 0.015 < np.mean(rgb[..., c] == 0) < 0.04
        assert 0.015 < np.mean(rgb[..., c] == 255) < 0.04


def test_scene_stretch_from_a_decimated_read(s2_rgb_paths, s2_rgb_raster):
    full = compute_stretch(s2_rgb_raster)
    quick = scene_stretch(s2_rgb_paths, max_size=512)
    assert quick.band_names == ("B04", "B03", "B02")
    for c in range(3):
        span = full.high[c] - full.low[c]
        assert abs(quick.low[c] - full.low[c]) < 0.05 * span
        assert abs(quick.high[c] - full.high[c]) < 0.05 * span
    tile = read_raster(s2_rgb_paths, window=np.s_[0:256, 0:256])
    np.testing.assert_array_equal(
        to_model_rgb(tile, stats=full), to_model_rgb(s2_rgb_raster, stats=full)[:256, :256]
    )


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((0,), np.uint16), r"got 1-D"),
        (np.zeros((0, 5), np.uint16), r"empty"),
        (np.zeros((3, 0, 5), np.uint16), r"empty"),
        (np.zeros((1, 2, 3, 4, 5), np.uint16), r"got 5-D"),
        (np.zeros((5, 5), bool), r"bool array is a mask"),
        (np.zeros((5, 5), np.complex64), r"dtype complex64"),
    ],
)
def test_bad_arrays(array, message):
    with pytest.raises(ValueError, match=message):
        to_model_rgb(array)


def test_all_nodata_and_all_nan():
    with pytest.raises(ValueError, match="no valid pixels"):
        to_model_rgb(np.zeros((20, 20), np.uint16), nodata=0)
    with pytest.raises(ValueError, match="no valid pixels"):
        compute_stretch(np.full((20, 20), np.nan, np.float32))
    # With scene stats, an all-nodata tile is simply black.
    black = to_model_rgb(
        np.zeros((20, 20), np.uint16), nodata=0, stats=StretchStats(low=(1,), high=(9,))
    )
    assert (black == 0).all()


def test_constant_image_is_mid_grey_with_a_warning():
    with pytest.warns(UserWarning, match=r"percentiles 2 and 98 are both 500 .*mid-grey"):
        rgb = to_model_rgb(np.full((10, 12), 500, np.uint16))
    assert (rgb == 128).all()
    band = np.full((10, 12), 0.25, np.float32)
    band[0, 0] = np.nan
    with pytest.warns(UserWarning, match="mid-grey"):
        rgb = to_model_rgb(band)
    assert rgb[0, 0, 0] == 0 and (rgb.reshape(-1, 3)[1:] == 128).all()


def test_no_warning_for_ordinary_images():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        to_model_rgb(np.arange(100, dtype=np.uint16).reshape(10, 10))


@pytest.mark.parametrize("percentiles", [(98, 2), (-1, 50), (50, 101), (5,), "2,98"])
def test_bad_percentiles(percentiles):
    with pytest.raises(ValueError, match="percentiles"):
        to_model_rgb(np.arange(100, dtype=np.uint16).reshape(10, 10), percentiles=percentiles)

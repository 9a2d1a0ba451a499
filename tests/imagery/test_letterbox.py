"""Letterbox: geometry, forward/inverse mappings (property tests) and the Sentinel-2 round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from napari_sam3.imagery.letterbox import Letterbox
from napari_sam3.imagery.stretch import to_model_rgb

shapes = st.tuples(st.integers(1, 3000), st.integers(1, 3000))
sizes = st.integers(8, 1024)


@st.composite
def box_in(draw, rows: int, cols: int) -> list[float]:
    x = sorted(draw(st.floats(0, cols, allow_nan=False)) for _ in range(2))
    y = sorted(draw(st.floats(0, rows, allow_nan=False)) for _ in range(2))
    return [x[0], y[0], x[1], y[1]]


# ----------------------------------------------------------------------------- geometry


@pytest.mark.parametrize(
    ("shape", "size", "resized", "scale"),
    [
        ((768, 1536), 1008, (504, 1008), 0.65625),
        ((1536, 768), 1008, (1008, 504), 0.65625),
        ((500, 500), 1008, (1008, 1008), 2.016),
        ((10980, 10980), 1008, (1008, 1008), 1008 / 10980),
        ((3, 1000), 112, (1, 112), 0.112),  # the short side never vanishes
    ],
)
def test_geometry(shape, size, resized, scale):
    lb = Letterbox(shape, size)
    assert lb.resized_shape == resized
    assert lb.scale == pytest.approx(scale)
    assert max(lb.resized_shape) == size


def test_apply_anchors_top_left_and_pads_with_zeros():
    lb = Letterbox((300, 600), 112)
    rgb = np.empty((300, 600, 3), np.uint8)
    rgb[...] = (10, 200, 77)
    out = lb.apply(rgb)
    assert out.shape == (1, 3, 112, 112) and out.dtype == np.uint8
    h, w = lb.resized_shape
    assert (h, w) == (56, 112)
    for c, value in enumerate((10, 200, 77)):
        assert (out[0, c, :h, :w] == value).all()
    assert (out[0, :, h:, :] == 0).all()


def test_apply_places_features_where_boxes_to_model_says():
    rows, cols = 700, 1100
    lb = Letterbox((rows, cols), 256)
    rgb = np.zeros((rows, cols, 3), np.uint8)
    box = [330, 120, 610, 470]  # x1, y1, x2, y2
    rgb[120:470, 330:610] = 255
    model = lb.apply(rgb)[0, 0]
    ys, xs = np.nonzero(model >= 128)
    found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    np.testing.assert_allclose(found, lb.boxes_to_model(box), atol=1.0)


def test_apply_rejects_wrong_images():
    lb = Letterbox((30, 40), 64)
    with pytest.raises(ValueError, match=r"uint8 RGB of shape \(30, 40, 3\)"):
        lb.apply(np.zeros((30, 40, 3), np.uint16))
    with pytest.raises(ValueError, match="to_model_rgb"):
        lb.apply(np.zeros((40, 30, 3), np.uint8))


@pytest.mark.parametrize(
    ("shape", "size", "message"),
    [
        ((0, 10), 64, "image_shape"),
        ((10, 10, 3), 64, r"image.shape\[:2\]"),
        ((10.5, 10), 64, "image_shape"),
        ((10, 10), 0, "size must be a positive integer"),
        ((10, 10), True, "size must be a positive integer"),
    ],
)
def test_bad_letterbox_arguments(shape, size, message):
    with pytest.raises(ValueError, match=message):
        Letterbox(shape, size)


# ----------------------------------------------------------------------------- boxes and points


@settings(max_examples=150, deadline=None)
@given(shape=shapes, size=sizes, data=st.data())
def test_boxes_round_trip(shape, size, data):
    lb = Letterbox(shape, size)
    boxes = np.array([data.draw(box_in(*shape)) for _ in range(3)])
    assume(((boxes[:, 2] > 0) & (boxes[:, 0] < shape[1])).all())
    assume(((boxes[:, 3] > 0) & (boxes[:, 1] < shape[0])).all())
    model = lb.boxes_to_model(boxes)
    h, w = lb.resized_shape
    assert (model >= 0).all() and (model[:, [0, 2]] <= w + 1e-9).all()
    assert (model[:, [1, 3]] <= h + 1e-9).all()
    np.testing.assert_allclose(lb.boxes_to_image(model), boxes, rtol=1e-12, atol=1e-9)
    # Model boxes rounded to whole model pixels come back within half a model pixel.
    sx, sy = lb.scale_xy
    back = lb.boxes_to_image(np.rint(model))
    assert (np.abs(back - boxes)[:, [0, 2]] <= 0.5 / sx + 1e-9).all()
    assert (np.abs(back - boxes)[:, [1, 3]] <= 0.5 / sy + 1e-9).all()


@settings(max_examples=150, deadline=None)
@given(shape=shapes, size=sizes, data=st.data())
def test_points_round_trip(shape, size, data):
    lb = Letterbox(shape, size)
    rows, cols = shape
    points = np.array(
        [[data.draw(st.floats(0, cols)), data.draw(st.floats(0, rows))] for _ in range(4)]
    )
    model = lb.points_to_model(points)
    np.testing.assert_allclose(lb.points_to_image(model), points, rtol=1e-12, atol=1e-9)
    single = lb.points_to_model(points[0])
    assert single.shape == (2,)


def test_whole_image_box_maps_to_resized_area():
    lb = Letterbox((768, 1536), 1008)
    np.testing.assert_allclose(lb.boxes_to_model([0, 0, 1536, 768]), [0, 0, 1008, 504])
    np.testing.assert_allclose(lb.boxes_to_image([0, 0, 1008, 1008]), [0, 0, 1536, 768])


def test_box_partly_outside_is_clipped_wholly_outside_is_an_error():
    lb = Letterbox((100, 200), 100)
    np.testing.assert_allclose(lb.boxes_to_model([-50, 10, 80, 300]), [0, 5, 40, 50])
    with pytest.raises(ValueError, match=r"box 1 \[250\.0, 10\.0, 300\.0, 20\.0\].*200 x 100"):
        lb.boxes_to_model([[0, 0, 10, 10], [250, 10, 300, 20]])
    with pytest.raises(ValueError, match="outside the image"):
        lb.points_to_model([[10, 10], [10, 101]])
    # Model boxes reaching into the padding come back clipped to the image.
    np.testing.assert_allclose(lb.boxes_to_image([90, 40, 100, 100]), [180, 80, 200, 100])


@pytest.mark.parametrize(
    ("boxes", "message"),
    [
        ([10, 10, 5, 20], "x1 <= x2"),
        ([1, 2, 3], r"shape \(4,\) or \(N, 4\)"),
        ([[[1, 2, 3, 4]]], r"shape \(4,\) or \(N, 4\)"),
        ([0, 0, np.nan, 4], "NaN or infinity"),
        (["a", 0, 1, 2], "must be numbers"),
    ],
)
def test_bad_boxes(boxes, message):
    with pytest.raises(ValueError, match=message):
        Letterbox((100, 200), 100).boxes_to_model(boxes)


def test_empty_box_list():
    lb = Letterbox((100, 200), 100)
    assert lb.boxes_to_model(np.zeros((0, 4))).shape == (0, 4)
    assert lb.boxes_to_image(np.zeros((0, 4))).shape == (0, 4)


# ----------------------------------------------------------------------------- masks


def _disk(rows: int, cols: int, cy: float, cx: float, radius: float) -> np.ndarray:
    yy, xx = np.mgrid[0:rows, 0:cols]
    return (yy + 0.5 - cy) ** 2 + (xx + 0.5 - cx) ** 2 <= radius**2


def _near_edge(mask: np.ndarray, reach: int) -> np.ndarray:
    """Pixels within ``reach`` pixels (chessboard distance) of the mask's boundary."""
    grown, shrunk = mask.copy(), mask.copy()
    for dy in range(-reach, reach + 1):
        for dx in range(-reach, reach + 1):
            rolled = np.roll(np.roll(mask, dy, axis=0), dx, axis=1)
            grown |= rolled
            shrunk &= rolled
    return grown & ~shrunk


@pytest.mark.parametrize(
    ("shape", "size"), [((768, 1536), 1008), ((900, 400), 112), ((50, 70), 256)]
)
def test_mask_round_trip_agrees_except_at_edges(shape, size):
    rows, cols = shape
    lb = Letterbox(shape, size)
    mask = _disk(rows, cols, rows * 0.4, cols * 0.55, min(rows, cols) * 0.3)
    model = lb.mask_to_model(mask)
    assert model.shape == (size, size) and model.dtype == bool
    h, w = lb.resized_shape
    assert not model[h:].any() and not model[:, w:].any()
    back = lb.mask_to_image(model)
    assert back.shape == shape
    differ = back != mask
    reach = int(np.ceil(1 / min(lb.scale_xy))) + 1
    assert not (differ & ~_near_edge(mask, reach)).any()
    assert differ.mean() < 0.02


def test_upscaled_mask_round_trip_is_exact():
    lb = Letterbox((40, 60), 240)  # exactly 4x
    rng = np.random.default_rng(0)
    mask = rng.random((40, 60)) < 0.3
    np.testing.assert_array_equal(lb.mask_to_image(lb.mask_to_model(mask)), mask)


def _under_centre(n_out: int, n_in: int) -> np.ndarray:
    """The input cell under each output cell's centre, by float geometry (exact at these sizes)."""
    return np.floor((np.arange(n_out) + 0.5) * (n_in / n_out)).astype(int)


@pytest.mark.parametrize(
    ("shape", "size"), [((768, 1536), 1008), ((900, 400), 112), ((50, 70), 256), ((7, 3), 16)]
)
def test_mask_mappings_take_the_pixel_under_each_centre(shape, size):
    """Every pixel of each mapping against the rule read pixel by pixel, for noise masks (a
    mapping that mixed up rows and columns or shifted by one would differ somewhere)."""
    rows, cols = shape
    lb = Letterbox(shape, size)
    h, w = lb.resized_shape
    rng = np.random.default_rng(rows * cols)
    model = rng.random((2, size, size)) < 0.5
    r, c = _under_centre(rows, h), _under_centre(cols, w)
    want = np.array([[[m[r[y], c[x]] for x in range(cols)] for y in range(rows)] for m in model])
    np.testing.assert_array_equal(lb.mask_to_image(model), want)
    # a crop of the model mask maps to the same image pixels as the whole mask does
    r0, c0, part = lb.crop_to_image(h // 3, w // 4, model[0, h // 3 : h - 1, w // 4 : w - 2])
    np.testing.assert_array_equal(part, want[0, r0 : r0 + part.shape[0], c0 : c0 + part.shape[1]])
    assert part.size > 0
    image = rng.random(shape) < 0.5
    rr, cc = _under_centre(h, rows), _under_centre(w, cols)
    back = np.zeros((size, size), bool)
    back[:h, :w] = [[image[rr[y], cc[x]] for x in range(w)] for y in range(h)]
    np.testing.assert_array_equal(lb.mask_to_model(image), back)


def test_mask_to_image_handles_stacks_and_integer_masks():
    lb = Letterbox((30, 50), 64)
    masks = np.zeros((2, 64, 64), np.uint8)
    masks[0, :10, :10] = 1
    masks[1, 20:, 20:] = 1
    out = lb.mask_to_image(masks)
    assert out.shape == (2, 30, 50) and out.dtype == bool
    np.testing.assert_array_equal(out[1], lb.mask_to_image(masks[1].astype(bool)))
    with pytest.raises(ValueError, match=r"mask > 0"):
        lb.mask_to_image(masks.astype(np.float32))
    with pytest.raises(ValueError, match=r"\(\.\.\., 64, 64\)"):
        lb.mask_to_image(np.zeros((30, 50), bool))


# ----------------------------------------------------------------------------- Sentinel-2


def test_sentinel2_read_stretch_letterbox_and_back(s2_rgb_raster):
    rgb = to_model_rgb(s2_rgb_raster)
    lb = Letterbox(rgb.shape[:2], 1008)
    model = lb.apply(rgb)
    assert model.shape == (1, 3, 1008, 1008)
    assert (model[0, :, 504:, :] == 0).all()
    assert model[0, :, :504, :].mean() > 20  # the scene is there, not black
    # The content is the scene, in place: the scale is 21/32, so 21x21-pixel blocks of the model
    # image cover exactly the 32x32-pixel blocks of the scene; their means must agree.
    a = model[0, :, :504, :1008].reshape(3, 24, 21, 48, 21).mean(axis=(2, 4))
    b = np.moveaxis(rgb, -1, 0).reshape(3, 24, 32, 48, 32).mean(axis=(2, 4))
    assert np.abs(a - b).max() < 1.5

    boxes = np.array([[100, 50, 400, 300], [1200.5, 600.25, 1536, 768], [0, 0, 1, 1]])
    back = lb.boxes_to_image(np.rint(lb.boxes_to_model(boxes)))
    assert np.abs(back - boxes).max() <= 0.5 / lb.scale + 1e-9

    bright = rgb.mean(axis=-1) > 150  # a mask drawn in image pixels: bright (cloud, snow) areas
    assert 0.01 < bright.mean() < 0.9
    back_mask = lb.mask_to_image(lb.mask_to_model(bright))
    differ = back_mask != bright
    assert not (differ & ~_near_edge(bright, 3)).any()

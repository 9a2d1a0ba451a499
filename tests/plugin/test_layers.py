"""Layer <-> library conversions of the widgets: images for the model, prompts in pixels,
results placed on the image (no model, no window: napari's viewer model only)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from napari.components import ViewerModel

from napari_sam3.plugin.widgets import _layers

pytestmark = pytest.mark.napari


def test_parse_bands():
    assert _layers.parse_bands("") is None
    assert _layers.parse_bands("B08, B04 B03") == ["B08", "B04", "B03"]
    assert _layers.parse_bands("4 3 2") == [4, 3, 2]


def test_multiband_array_layer_needs_bands():
    viewer = ViewerModel()
    data = np.arange(4 * 20 * 30, dtype=np.uint16).reshape(4, 20, 30)
    layer = viewer.add_image(data, name="four bands")
    with pytest.raises(ValueError, match="choose 3"):
        _layers.model_image(viewer, layer)
    target = _layers.model_image(viewer, layer, "3 2 1")
    np.testing.assert_array_equal(target.image, data[[2, 1, 0]])
    assert target.shape == (20, 30) and target.offset == (0, 0)
    with pytest.raises(ValueError, match=r"band 5 is out of range .*1-based \(1\.\.4\)"):
        _layers.model_image(viewer, layer, "5 2 1")


def test_array_layer_bands_by_name_follow_the_one_rule():
    viewer = ViewerModel()
    data = np.arange(4 * 20 * 30, dtype=np.uint16).reshape(4, 20, 30)
    named = viewer.add_image(
        data, name="named", metadata={"band_names": ["B02", "B03", "B04", "B08"]}
    )
    target = _layers.model_image(viewer, named, "b08, 3 B02")
    np.testing.assert_array_equal(target.image, data[[3, 2, 0]])
    with pytest.raises(ValueError, match=r"named has no band named 'B11'; .* 4 B08"):
        _layers.model_image(viewer, named, "B11 B04 B03")
    plain = viewer.add_image(data, name="plain")
    with pytest.raises(ValueError, match=r"plain has no band names, so band 'B04'"):
        _layers.model_image(viewer, plain, "B04 B03 B02")


def test_rgb_layer_drops_alpha_and_refuses_bands():
    viewer = ViewerModel()
    data = np.random.default_rng(0).integers(0, 255, (20, 30, 4), dtype=np.uint8)
    layer = viewer.add_image(data, rgb=True)
    np.testing.assert_array_equal(_layers.model_image(viewer, layer).image, data[..., :3])
    with pytest.raises(ValueError, match="RGB layer"):
        _layers.model_image(viewer, layer, "1 2 3")


def test_shapes_on_any_scale_reach_the_image_pixels():
    viewer = ViewerModel()
    image = viewer.add_image(np.zeros((100, 200), np.uint16), scale=(10, 10), translate=(-50, 30))
    # A shapes layer in world units (scale 1): draw the image's pixel edges rows 20..39, cols 5..14.
    shapes = viewer.add_shapes(ndim=2)
    top_left = np.array(image.data_to_world((19.5, 4.5)))
    bottom_right = np.array(image.data_to_world((39.5, 14.5)))
    shapes.add_rectangles(np.array([top_left, bottom_right]))
    target = _layers.model_image(viewer, image)
    boxes, labels = _layers.boxes_from_shapes(shapes, target)
    np.testing.assert_allclose(boxes, [[5.0, 20.0, 15.0, 40.0]])
    np.testing.assert_array_equal(labels, [1])
    # The same rectangle as a region crops the image to exactly those pixels.
    assert _layers.region_window(shapes, image) == (20, 40, 5, 15)


def test_negative_boxes_from_the_positive_feature():
    viewer = ViewerModel()
    image = viewer.add_image(np.zeros((50, 50), np.uint8))
    shapes = viewer.add_shapes(
        [np.array([[1, 1], [5, 5]]), np.array([[10, 10], [20, 20]])],
        shape_type="rectangle",
        features=pd.DataFrame({"positive": [True, False]}),
    )
    _, labels = _layers.boxes_from_shapes(shapes, _layers.model_image(viewer, image))
    np.testing.assert_array_equal(labels, [1, 0])


def test_crop_results_are_placed_on_the_image_even_rotated():
    viewer = ViewerModel()
    image = viewer.add_image(
        np.zeros((100, 200), np.uint8), scale=(2, 3), translate=(7, -4), rotate=30
    )
    place = _layers.placement(image, (12, 34))
    crop = viewer.add_labels(np.zeros((10, 10), np.int32), **place)
    for point in [(0, 0), (9, 0), (3, 7)]:
        np.testing.assert_allclose(
            crop.data_to_world(point), image.data_to_world((point[0] + 12, point[1] + 34))
        )
    same = viewer.add_labels(np.zeros((100, 200), np.int32), **_layers.placement(image))
    _layers.check_same_grid(same, image)
    other = viewer.add_labels(np.zeros((100, 200), np.int32))
    with pytest.raises(ValueError, match="not placed on"):
        _layers.check_same_grid(other, image)


def test_results_to_labels_keeps_the_better_object_on_top():
    a = np.zeros((5, 5), bool)
    a[1:4, 1:4] = True
    b = np.zeros((5, 5), bool)
    b[2:5, 2:5] = True
    frame = pd.DataFrame(
        {
            "box": [None, None],
            "score": np.array([0.9, 0.5], np.float32),
            "mask": [a, b],
            "keyword": ["x", "x"],
            "prompt_kind": ["text", "text"],
        }
    )
    labels, features = _layers.results_to_labels(frame, (5, 5))
    assert labels[2, 2] == 1 and labels[4, 4] == 2 and labels[0, 0] == 0
    assert features["index"].tolist() == [1, 2]
    assert features["score"].tolist() == pytest.approx([0.9, 0.5])


def _stack_viewer(count: int = 4):
    """A viewer holding a synthetic georeferenced `count`-band raster read as band layers."""
    from napari.layers import Layer
    from rasterio.transform import Affine

    from napari_sam3.imagery.raster import Raster
    from napari_sam3.plugin.reader import raster_layers

    rng = np.random.default_rng(1)
    data = rng.integers(0, 4096, (count, 40, 60), dtype=np.uint16)
    names = ("B02", "B03", "B04", "B08")[:count]
    raster = Raster(data, None, Affine(10, 0, 500000, 0, -10, 4000000), None, names, "s.tif")
    viewer = ViewerModel()
    for layer_data in raster_layers(raster):
        viewer.add_layer(Layer.create(*layer_data))
    return viewer, data


def test_stack_bands_by_name_with_the_displayed_stretch():
    from napari_sam3.imagery.stretch import to_model_rgb

    viewer, data = _stack_viewer()
    assert [layer.visible for layer in viewer.layers] == [True, True, True, False]
    assert viewer.layers[0].metadata["sam3"]["rgb_bands"] == ["B04", "B03", "B02"]
    assert [layer.colormap.name for layer in viewer.layers] == ["blue", "green", "red", "gray"]
    target = _layers.model_image(viewer, viewer.layers[3], "b08 B04 b03")
    np.testing.assert_array_equal(target.image.data, data[[3, 2, 1]])
    assert target.image.band_names == ("B08", "B04", "B03")
    # The stretch shown on screen is the one the model gets.
    lows = [viewer.layers[i].contrast_limits[0] for i in (3, 2, 1)]
    assert target.stats.low == pytest.approx(lows)
    np.testing.assert_array_equal(
        to_model_rgb(target.image, stats=target.stats), to_model_rgb(data[[3, 2, 1]])
    )
    with pytest.raises(ValueError, match="no band named 'B11'"):
        _layers.model_image(viewer, viewer.layers[0], "B11")


def test_paint_new_labels_goes_around_labels_and_undoes_in_one_step():
    viewer = ViewerModel()
    mine = np.zeros((10, 12), np.int32)
    mine[0:3, 0:3] = 4
    # The analyst's features without an index column: napari reads row i as label i.
    features = pd.DataFrame({"note": [f"row {i}" for i in range(5)]})
    layer = viewer.add_labels(mine.copy(), name="mine", features=features)
    a = np.nonzero(np.pad(np.ones((4, 4), bool), ((0, 6), (0, 8))))  # rows/cols 0..3
    b = np.nonzero(np.pad(np.ones((4, 4), bool), ((2, 4), (2, 6))))  # rows/cols 2..5
    wholly_on_theirs = (np.array([0, 1]), np.array([0, 1]))
    geo = {"crs": "EPSG:32633", "transform": [10.0, 0.0, 0.0, 0.0, -10.0, 0.0]}
    painted = _layers.paint_new_labels(
        layer,
        [(*a, {"score": 0.9, "keyword": "roof"}), (*wholly_on_theirs, {}), (*b, {"score": 0.5})],
        georeference=geo,
    )
    expected = mine.copy()
    expected[0:4, 0:4][mine[0:4, 0:4] == 0] = 5  # around the analyst's 4
    expected[2:6, 2:6][expected[2:6, 2:6] == 0] = 6  # around 4 and the earlier object too
    np.testing.assert_array_equal(layer.data, expected)
    assert painted.ids == [5, 6], "the object wholly on their labels gets no id"
    added = layer.features.iloc[-2:]
    assert added["index"].tolist() == [5, 6] and added["keyword"].tolist() == ["roof", ""]
    assert added["area"].tolist() == [np.count_nonzero(expected == i) for i in (5, 6)]
    assert layer.features["index"].tolist()[:5] == [0, 1, 2, 3, 4]
    assert layer.metadata["crs"] == "EPSG:32633"
    layer.undo()  # one step
    np.testing.assert_array_equal(layer.data, mine)
    layer.redo()

    layer.data_setitem((np.array([3]), np.array([3])), 4)  # painted over object 5 since
    _layers.take_back(painted)
    expected = mine.copy()
    expected[3, 3] = 4
    np.testing.assert_array_equal(layer.data, expected)
    assert 5 not in layer.features["index"].tolist() and 6 not in layer.features["index"].tolist()

    over = _layers.paint_new_labels(layer, [(*a, {})], overwrite=True)
    assert over.ids == [5] and np.all(layer.data[0:4, 0:4] == 5)
    _layers.take_back(over)
    np.testing.assert_array_equal(layer.data, expected)

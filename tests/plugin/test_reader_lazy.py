"""The reader on rasters too large to read whole: multiscale dask levels of windowed reads.

Real GeoTIFFs written here (tiled 512, deflate), compared with plain rasterio reads of the same
files; the layers go through a real napari viewer.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari

TRANSFORM = (10.0, 0.0, 300000.0, 0.0, -10.0, 5900000.0)


def _write(path, data, overviews=None, descriptions=None):
    import rasterio
    from rasterio.enums import Resampling
    from rasterio.transform import Affine

    count, rows, cols = data.shape
    profile = {
        "driver": "GTiff",
        "width": cols,
        "height": rows,
        "count": count,
        "dtype": data.dtype.name,
        "crs": "EPSG:32633",
        "transform": Affine(*TRANSFORM),
        "tiled": True,
        "blockxsize": 512,
        "blockysize": 512,
        "compress": "deflate",
    }
    with rasterio.open(path, "w", **profile) as ds:
        ds.write(data)
        if descriptions:
            ds.descriptions = descriptions
        if overviews:
            ds.build_overviews(overviews, Resampling.nearest)
    return path


def _pattern(count, rows, cols, seed=0):
    """Imagery-like 12-bit values that differ in every pixel (so a wrong pixel shows)."""
    rng = np.random.default_rng(seed)
    r = np.arange(rows, dtype=np.uint32)[:, None]
    c = np.arange(cols, dtype=np.uint32)[None, :]
    bands = [((r * (7 + b) + c * (13 + 2 * b)) % 3000).astype(np.uint16) for b in range(count)]
    data = np.stack(bands)
    data += rng.integers(0, 50, data.shape, dtype=np.uint16)
    return data


@pytest.fixture(scope="module")
def big_band(tmp_path_factory):
    """6000 x 6000 uint16, one band, no overviews (72 MB of pixels: over the whole-read limit)."""
    data = _pattern(1, 6000, 6000)
    path = _write(tmp_path_factory.mktemp("lazy") / "big.tif", data)
    return path, data[0]


@pytest.fixture(scope="module")
def big_rgb_stack(tmp_path_factory):
    """4100 x 4099 x 3 uint16 named bands (sides not multiples of any level factor)."""
    data = _pattern(3, 4100, 4099, seed=1)
    path = _write(
        tmp_path_factory.mktemp("lazy") / "stack.tif", data, descriptions=("B04", "B03", "B02")
    )
    return path, data


def _decimated(full, factor):
    """The documented decimation: pixel (r, c) is (r*f + f//2, c*f + f//2), clamped."""
    rows = np.minimum(np.arange(-(-full.shape[0] // factor)) * factor + factor // 2, len(full) - 1)
    cols = np.minimum(
        np.arange(-(-full.shape[1] // factor)) * factor + factor // 2, full.shape[1] - 1
    )
    return full[np.ix_(rows, cols)]


def test_large_file_is_multiscale_dask_levels_of_the_file(big_band):
    import dask.array as da
    import rasterio
    from rasterio.enums import Resampling
    from rasterio.windows import Window

    from napari_sam3.plugin.reader import read_layers

    path, full = big_band
    ((levels, kwargs, kind),) = read_layers(str(path))
    assert kind == "image" and kwargs["multiscale"] is True
    assert all(isinstance(level, da.Array) for level in levels)
    assert [level.shape for level in levels] == [
        (6000, 6000),
        (3000, 3000),
        (1500, 1500),
        (750, 750),
    ]
    # level 0 chunks follow the file's 512 px blocks
    assert levels[0].chunks[0][:3] == (512, 512, 512) and sum(levels[0].chunks[1]) == 6000
    with rasterio.open(path) as ds:
        window = Window(1000, 2100, 700, 650)
        np.testing.assert_array_equal(
            np.asarray(levels[0][2100:2750, 1000:1700]), ds.read(1, window=window)
        )
        # the coarsest level is GDAL's own nearest decimated read of the whole file
        gdal = ds.read(1, out_shape=(750, 750), resampling=Resampling.nearest)
    np.testing.assert_array_equal(np.asarray(levels[3]), gdal)
    np.testing.assert_array_equal(np.asarray(levels[1][1000:1300, 2500:3000]),
                                  full[1::2, 1::2][1000:1300, 2500:3000])  # fmt: skip
    np.testing.assert_array_equal(np.asarray(levels[2]), _decimated(full, 4))


def test_large_stack_keeps_the_layout_and_georeferencing_of_a_whole_read(big_rgb_stack):
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.reader import raster_layers, read_layers

    path, data = big_rgb_stack
    lazy = read_layers(str(path))
    eager = raster_layers(read_raster(path))
    assert len(lazy) == len(eager) == 3
    for (levels, kw, _), (array, ref, _), full in zip(lazy, eager, data, strict=True):
        assert isinstance(array, np.ndarray) and not ref.get("multiscale")
        assert [lv.shape for lv in levels] == [(4100, 4099), (2050, 2050), (1025, 1025),
                                               (513, 513)]  # fmt: skip
        for key in ("name", "scale", "translate", "colormap", "blending", "visible"):
            assert kw[key] == ref[key], key
        meta, ref_meta = dict(kw["metadata"]), dict(ref["metadata"])
        sam3, ref_sam3 = dict(meta.pop("sam3")), dict(ref_meta.pop("sam3"))
        assert meta == ref_meta
        assert meta["transform"] == list(TRANSFORM)
        stretch, ref_stretch = sam3.pop("stretch"), ref_sam3.pop("stretch")
        sam3.pop("stack"), ref_sam3.pop("stack")
        assert sam3 == ref_sam3
        # The stretch comes from a sample of blocks: it is what the screen shows and close to
        # the whole band's percentiles.
        assert kw["contrast_limits"] == (stretch["low"], stretch["high"])
        assert "16 of" in stretch["sample"]
        span = ref_stretch["high"] - ref_stretch["low"]
        assert abs(stretch["low"] - ref_stretch["low"]) < 0.05 * span
        assert abs(stretch["high"] - ref_stretch["high"]) < 0.05 * span
        # edge chunks clamp to the last row / column
        np.testing.assert_array_equal(np.asarray(levels[3]), _decimated(full, 8))
        np.testing.assert_array_equal(np.asarray(levels[0][3900:, 3800:]), full[3900:, 3800:])
    assert len({kw["metadata"]["sam3"]["stack"] for _, kw, _ in lazy}) == 1


def test_overviews_are_used_as_levels(tmp_path):
    import rasterio

    from napari_sam3.plugin.reader import read_layers

    data = _pattern(1, 4608, 4608, seed=2)
    path = _write(tmp_path / "ovr.tif", data, overviews=[2, 4, 8])
    ((levels, kwargs, _),) = read_layers(str(path))
    assert [lv.shape for lv in levels] == [(4608, 4608), (2304, 2304), (1152, 1152), (576, 576)]
    for i, level in enumerate(levels[1:]):
        with rasterio.open(path, overview_level=i) as ds:
            np.testing.assert_array_equal(np.asarray(level), ds.read(1))
    assert kwargs["metadata"]["sam3"]["stretch"]["sample"].startswith("the coarsest overview")


def test_small_files_are_still_read_whole(tmp_path):
    from napari_sam3.plugin.reader import read_layers

    data = _pattern(2, 1000, 3000)
    ((first, kwargs, _), _) = read_layers(str(_write(tmp_path / "small.tif", data)))
    assert isinstance(first, np.ndarray) and "multiscale" not in kwargs
    np.testing.assert_array_equal(first, data[0])


def test_viewer_reads_only_the_chunks_it_shows(make_napari_viewer, big_band, monkeypatch):
    """Opened, drawn zoomed out (coarsest level only), then zoomed in on a corner: level 0 is
    read chunk by chunk, never whole; the model's crop is a windowed read of the file."""
    from napari_sam3.imagery import pyramid
    from napari_sam3.plugin.widgets import _layers

    reads = []
    original = pyramid._read_decimated

    def counting(path, overview, factor, base_shape, rows, cols):
        reads.append((factor, len(rows) * len(cols)))
        return original(path, overview, factor, base_shape, rows, cols)

    monkeypatch.setattr(pyramid, "_read_decimated", counting)
    path, full = big_band
    viewer = make_napari_viewer()
    (layer,) = viewer.open(str(path), plugin="napari-sam3")
    assert layer.multiscale and len(layer.data) == 4
    np.testing.assert_allclose(layer.scale, (10.0, 10.0))
    np.testing.assert_allclose(layer.data_to_world((0, 0)), (-(5900000.0 - 5.0), 300005.0))
    viewer.screenshot(canvas_only=True)
    assert {factor for factor, _ in reads} <= {1, 8}  # the sample (level 0) and the coarsest
    level0_before = sum(n for f, n in reads if f == 1)
    assert level0_before <= 16 * 512 * 512  # only the stretch sample

    # chunks (1..2, 1..2): none of them in the stretch sample (chunk rows and columns 0, 4, 7, 11)
    viewer.camera.center = layer.data_to_world((1024, 1024))
    viewer.camera.zoom = viewer.camera.zoom * 40
    viewer.screenshot(canvas_only=True)
    assert layer.data_level == 0
    level0 = sum(n for f, n in reads if f == 1) - level0_before
    assert 0 < level0 <= 0.25 * full.size

    shapes = viewer.add_shapes(
        [np.array([[100, 150], [100, 650], [420, 650], [420, 150]]) * 10.0 + [-5900000.0, 300000]],
        shape_type="rectangle",
    )
    reads.clear()
    target = _layers.model_image(viewer, layer, region=shapes)
    (r0, c0), (rows, cols) = target.offset, target.shape
    np.testing.assert_array_equal(target.image, full[r0 : r0 + rows, c0 : c0 + cols])
    assert rows * cols < 0.01 * full.size and not reads  # read from the file, not the levels
    assert (target.stats.low[0], target.stats.high[0]) == tuple(layer.contrast_limits)


def test_panel_on_a_region_of_a_multiscale_stack(make_napari_viewer, big_rgb_stack, connected, ui):
    """The SAM3 panel on a region of a lazily opened scene: the model gets the file's pixels
    under the region with the displayed stretch, and the result sits on the image's pixels."""
    from napari_sam3.client.sam3 import PreparedImage
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.letterbox import Letterbox
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.imagery.stretch import StretchStats, to_model_rgb
    from napari_sam3.plugin.widgets._fields import REGION

    path, _ = big_rgb_stack
    viewer = make_napari_viewer()
    layers = viewer.open(str(path), plugin="napari-sam3")
    assert all(layer.multiscale for layer in layers)
    image = layers[1]  # B03: any band of the stack, the model gets B04, B03, B02
    region = viewer.add_shapes(name="region", ndim=2)
    corner = np.array(image.data_to_world((3000, 1000)))
    far = np.array(image.data_to_world((3299, 1399)))
    region.add_rectangles(np.array([corner - 5.0, far + 5.0]))  # rows 3000..3299, cols 1000..1399
    _dock, panel = viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    panel.image.value = image
    panel.where.value = REGION
    panel.region.value = region
    panel.score_thr.value = 0.0
    text = panel.mode("Text & exemplars")
    text.keywords.value = "field"
    ui.run(text, text.run_button)

    result = viewer.layers[-1]
    assert result.data.shape == (300, 400)
    assert result.metadata["sam3"]["offset"] == [3000, 1000]
    np.testing.assert_allclose(result.data_to_world((0, 0)), image.data_to_world((3000, 1000)))
    crop = read_raster(path, window=np.s_[3000:3300, 1000:1400])
    stretch = [layer.metadata["sam3"]["stretch"] for layer in layers]
    stats = StretchStats(tuple(s["low"] for s in stretch), tuple(s["high"] for s in stretch))
    rgb = to_model_rgb(crop, stats=stats)
    box = Letterbox(rgb.shape[:2], connected.image_size)
    frame = connected.segment(
        PreparedImage(rgb, box, box.apply(rgb)), prompt="field", score_thr=0.0
    )
    np.testing.assert_array_equal(result.data, masks_to_labels(frame, (300, 400)))


def _viewer_with(layer_data):
    from napari.components import ViewerModel
    from napari.layers import Layer

    viewer = ViewerModel()
    layers = [viewer.add_layer(Layer.create(*item)) for item in layer_data]
    return viewer, layers


def _region(viewer, image, r0, c0, r1, c1):
    region = viewer.add_shapes(name="region", ndim=2)
    corner = np.array(image.data_to_world((r0, c0)))
    far = np.array(image.data_to_world((r1 - 1, c1 - 1)))
    region.add_rectangles(np.array([corner - 5.0, far + 5.0]))
    return region


def test_large_uint8_rgb_is_one_multiscale_rgb_layer(tmp_path):
    from napari_sam3.plugin.reader import read_layers
    from napari_sam3.plugin.widgets import _layers

    data = (_pattern(3, 4200, 4300, seed=3) % 256).astype(np.uint8)
    path = _write(tmp_path / "photo.tif", data)
    ((levels, kwargs, _),) = read_layers(str(path))
    assert kwargs["rgb"] and kwargs["multiscale"]
    assert [lv.shape for lv in levels] == [(4200, 4300, 3), (2100, 2150, 3), (1050, 1075, 3),
                                           (525, 538, 3)]  # fmt: skip
    rgb = np.moveaxis(data, 0, -1)
    np.testing.assert_array_equal(np.asarray(levels[0][1000:1600, 2000:2512]),
                                  rgb[1000:1600, 2000:2512])  # fmt: skip
    np.testing.assert_array_equal(np.asarray(levels[3])[..., 1], _decimated(data[1], 8))
    viewer, (layer,) = _viewer_with(read_layers(str(path)))
    target = _layers.model_image(viewer, layer, region=_region(viewer, layer, 10, 20, 300, 420))
    assert target.offset == (10, 20)
    np.testing.assert_array_equal(target.image, rgb[10:300, 20:420])


def test_large_stack_of_single_band_files(tmp_path):
    """Sentinel-2 style: one file per band, stacked; each file keeps its own reads."""
    from napari_sam3.plugin.reader import read_layers
    from napari_sam3.plugin.widgets import _layers

    data = _pattern(3, 4200, 4200, seed=4)
    paths = [str(_write(tmp_path / f"T33UUU_{b}.tif", data[i : i + 1]))
             for i, b in enumerate(("B04", "B03", "B02"))]  # fmt: skip
    layers = read_layers(paths)
    assert [kw["metadata"]["sam3"]["band"] for _, kw, _ in layers] == ["B04", "B03", "B02"]
    assert [kw["metadata"]["source"] for _, kw, _ in layers] == [paths] * 3
    for (levels, _, _), band in zip(layers, data, strict=True):
        np.testing.assert_array_equal(np.asarray(levels[3]), _decimated(band, 8))
    viewer, shown = _viewer_with(layers)
    target = _layers.model_image(viewer, shown[2], region=_region(viewer, shown[2], 4000, 4100,
                                                                   4200, 4200))  # fmt: skip
    assert target.bands == ["B04", "B03", "B02"]
    np.testing.assert_array_equal(target.image.data, data[:, 4000:4200, 4100:4200])

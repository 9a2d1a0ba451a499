"""The Scene widget: a real Sentinel-2 GeoTIFF segmented tile by tile (tiny random-weight model).

The widget must give exactly what `segment_scene` gives for the same file and arguments, as a new
labels layer on the image's pixels, with the progress bar counting the tiles.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari

TILE, OVERLAP = 160, 32


@pytest.fixture
def scene_file(tmp_path, s2_crop):
    """The 300 x 420 true-colour Sentinel-2 crop (uint16, B04 B03 B02) as a GeoTIFF."""
    import rasterio

    path = tmp_path / "s2_crop.tif"
    count, rows, cols = s2_crop.data.shape
    profile = {
        "driver": "GTiff",
        "width": cols,
        "height": rows,
        "count": count,
        "dtype": s2_crop.data.dtype,
        "crs": s2_crop.crs,
        "transform": s2_crop.transform,
    }
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(s2_crop.data)
        dst.descriptions = tuple(s2_crop.band_names)
    return path


@pytest.fixture
def scene_viewer(make_napari_viewer, scene_file):
    viewer = make_napari_viewer()
    layers = viewer.open(str(scene_file), plugin="napari-sam3")
    assert len(layers) == 3
    return viewer


def _widget(viewer):
    from napari_sam3.plugin.widgets import SceneWidget

    widget = SceneWidget(viewer)
    viewer.window.add_dock_widget(widget, name="SceneWidget")
    widget.image.value = viewer.layers[0]
    widget.prompt.value = "building"
    widget.tile_size.value = TILE
    widget.overlap.value = OVERLAP
    widget.score_thr.value = 0.0
    widget.max_det.value = 20
    return widget


def test_scene_widget_matches_segment_scene(scene_viewer, connected, scene_file, ui):
    from napari_sam3.core.columns import FEATURE_COLUMNS
    from napari_sam3.scene import scene_labels, segment_scene, tile_grid

    viewer = scene_viewer
    image = viewer.layers[0]
    widget = _widget(viewer)
    before = len(viewer.layers)
    ui.run(widget, widget.run_button)

    frame = segment_scene(
        connected,
        scene_file,
        prompt="building",
        tile_size=TILE,
        overlap=OVERLAP,
        score_thr=0.0,
        mask_thr=0.5,
        max_det=20,
        dedup=0.85,
        progress=False,
    )
    tiles = len(tile_grid(300, 420, TILE, OVERLAP))
    assert tiles == len(frame.attrs["tiles"]) > 1
    assert widget.tiles == tiles and widget.tiles_done == tiles

    assert len(viewer.layers) == before + 1
    layer = viewer.layers[-1]
    assert layer is widget.result and layer.name == "SAM3 scene building"
    assert layer.data.shape == (300, 420) and layer.data.dtype == np.int32
    assert len(frame) >= 1
    assert len(layer.features) == len(frame)
    np.testing.assert_array_equal(layer.data, scene_labels(frame))
    assert ui.label_ids(layer) <= set(range(1, len(frame) + 1))
    features = layer.features
    assert list(features.columns) == [*FEATURE_COLUMNS, "tile"]  # the layer builder's, + tile
    np.testing.assert_allclose(features["score"], frame["score"], rtol=1e-6)
    assert features["tile"].tolist() == frame["tile"].tolist()
    assert set(features["keyword"]) == {"building"} and set(features["prompt_kind"]) == {"text"}
    np.testing.assert_allclose(layer.scale, image.scale)
    np.testing.assert_allclose(layer.translate, image.translate)
    assert layer.metadata["transform"] == image.metadata["transform"]
    assert layer.metadata["sam3"]["kind"] == "result"
    assert f"in {tiles} tiles" in widget.status.value

    # The same scene chosen as a file: a second layer (the first is never overwritten), placed
    # by the file's own georeferencing, which is where the reader put the image.
    widget.image.value = None
    widget.file.value = scene_file
    ui.run(widget, widget.run_button)
    assert len(viewer.layers) == before + 2
    again = viewer.layers[-1]
    assert again is not layer and again.name == layer.name + " [1]"
    np.testing.assert_array_equal(again.data, layer.data)
    np.testing.assert_allclose(again.scale, image.scale)
    np.testing.assert_allclose(again.translate, image.translate)
    assert again.metadata["transform"] == image.metadata["transform"]


def test_scene_widget_cancel_and_errors(scene_viewer, connected, ui, qtbot):
    from qtpy.QtCore import QThreadPool

    viewer = scene_viewer
    widget = _widget(viewer)
    before = len(viewer.layers)
    ui.click(widget.run_button)
    assert widget.job.running and not widget.run_button.enabled
    ui.click(widget.cancel_button)
    assert not widget.job.running and widget.run_button.enabled
    assert widget._cancel_event.is_set() and "cancelled" in widget.status.value
    QThreadPool.globalInstance().waitForDone(120_000)
    qtbot.wait(50)
    assert len(viewer.layers) == before

    widget.prompt.value = " , "
    ui.click(widget.run_button)
    assert "type a text prompt" in widget.status.value
    note = ui.last_notification()
    assert note.severity == "error" and "type a text prompt" in str(note.message)
    assert len(viewer.layers) == before


class SegmentSpy:
    """Records the settings, query and result of every `segment_scene` call (the real one
    runs): the widget gives it a Query and a SceneSettings."""

    def __init__(self, monkeypatch) -> None:
        import napari_sam3.scene as scene
        from napari_sam3.prompts.query import Query
        from napari_sam3.scene.settings import FIELDS, SceneSettings

        self.calls: list[tuple[dict, object]] = []
        real = scene.segment_scene

        def spied(client, source, query, settings, **kwargs):
            assert isinstance(query, Query) and isinstance(settings, SceneSettings)
            frame = real(client, source, query, settings, **kwargs)
            given = {name: getattr(settings, name) for name in FIELDS}
            self.calls.append(({**given, "query": query}, frame))
            return frame

        monkeypatch.setattr(scene, "segment_scene", spied)


def _scene_tab(viewer):
    _dock, panel = viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    panel.image.value = viewer.layers[0]
    panel.score_thr.value = 0.0
    panel.max_det.value = 20
    scene = panel.mode("Scene")
    scene.prompt.value = "building"
    return panel, scene


def test_scene_tab_gsd_resamples_the_tiles(scene_viewer, connected, scene_file, ui, monkeypatch):
    from rasterio.transform import Affine

    from napari_sam3.imagery.raster import raster_info
    from napari_sam3.plugin.georef import transform_kwargs
    from napari_sam3.plugin.widgets._layers import image_shape
    from napari_sam3.scene import scene_labels, tile_grid

    viewer = scene_viewer
    image = viewer.layers[0]
    panel, scene = _scene_tab(viewer)
    assert scene.gsd.native.isVisibleTo(panel.native) and scene.gsd.value == 0
    assert "metres" in scene.gsd.tooltip and "native" in scene.gsd.tooltip
    spy = SegmentSpy(monkeypatch)
    scene.tile_size.value, scene.overlap.value = 320, 32
    scene.gsd.value = 5.0  # the raster's 10 m pixels upsampled 2x
    ui.run(scene, scene.run_button)

    ((kwargs, frame),) = spy.calls
    assert kwargs["gsd"] == 5.0 and kwargs["aoi"] is None
    grid = raster_info(scene_file, gsd=5.0)
    assert (grid.rows, grid.cols) == (600, 840) != image_shape(image)
    tiles = len(tile_grid(grid.rows, grid.cols, 320, 32))
    assert scene.tiles == scene.tiles_done == tiles == len(frame.attrs["tiles"])
    assert frame.attrs["scene"]["gsd"] == 5.0 and len(frame) >= 1
    assert set(frame["gsd"]) == {5.0}
    layer = viewer.layers[-1]
    assert layer.name == scene.result.name == "SAM3 scene building"  # (a proxy of it)
    assert layer.data.shape == (grid.rows, grid.cols), frame.attrs["scene"]
    np.testing.assert_array_equal(layer.data, scene_labels(frame))
    # Placed on the 5 m grid's own georeferencing: over the image, at half its pixel size.
    assert Affine(*layer.metadata["transform"]) == grid.transform
    place = transform_kwargs(grid.transform)
    np.testing.assert_allclose(layer.scale, place["scale"])
    np.testing.assert_allclose(layer.scale, np.asarray(image.scale)[-2:] / 2)
    np.testing.assert_allclose(layer.translate, place["translate"])
    record = layer.metadata["sam3"]
    assert record["gsd"] == 5.0 and record["image_layer"] == image.name


def test_scene_tab_memory_budget_plans_the_run(scene_viewer, connected, ui, monkeypatch):
    from napari_sam3.scene.budget import DEFAULT_BUDGET_CAP, MIN_BUDGET

    _panel, scene = _scene_tab(scene_viewer)
    assert scene.memory.value == 0 and "1.5 GiB" in scene.memory.tooltip
    spy = SegmentSpy(monkeypatch)
    scene.tile_size.value = 320
    ui.run(scene, scene.run_button)  # 0: the default, from the memory available now
    scene.memory.value = 0.5
    ui.run(scene, scene.run_button)
    (auto, auto_frame), (half, half_frame) = spy.calls
    assert MIN_BUDGET <= auto["memory_budget"] <= DEFAULT_BUDGET_CAP
    assert auto_frame.attrs["memory"]["budget"] == auto["memory_budget"]
    assert half["memory_budget"] == half_frame.attrs["memory"]["budget"] == 2**29
    assert len(half_frame) == len(auto_frame)  # the plan never changes what is found
    scene.memory.value = 0.05  # below what a plan can work with: said, nothing run
    ui.click(scene.run_button)
    assert len(spy.calls) == 2 and "too small" in scene.status.value


def _region(viewer, image, corners):
    """A Shapes layer whose last rectangle has the image's data coordinates `corners`."""
    (r0, c0), (r1, c1) = corners
    world = [image.data_to_world(p) for p in ((r0, c0), (r0, c1), (r1, c1), (r1, c0))]
    return viewer.add_shapes([np.asarray(world)], shape_type="rectangle", name="AOI")


def test_selected_region_limits_the_scene_run_to_its_tiles(
    scene_viewer, connected, scene_file, ui, monkeypatch
):
    from napari_sam3.plugin.widgets._fields import REGION, WHOLE
    from napari_sam3.scene import tile_grid
    from napari_sam3.scene.aoi import Bbox, tiles_touching

    viewer = scene_viewer
    image = viewer.layers[0]
    # Pixels 100.5..150.5 down, 22.5..79.5 across (continuous): rows 100..151, cols 22..80.
    region = _region(viewer, image, ((100, 22), (150, 79)))
    window = (100, 22, 151, 80)
    grid = tile_grid(300, 420, TILE, OVERLAP)
    expected = [t.index for t in tiles_touching(grid, window)]
    assert 0 < len(expected) < len(grid)

    panel, scene = _scene_tab(viewer)
    scene.tile_size.value, scene.overlap.value = TILE, OVERLAP
    spy = SegmentSpy(monkeypatch)
    panel.where.value = REGION
    panel.region.value = None
    ui.click(scene.run_button)
    assert "choose the Shapes layer" in scene.status.value and not spy.calls

    panel.region.value = region
    ui.run(scene, scene.run_button)
    ((kwargs, frame),) = spy.calls
    assert isinstance(kwargs["aoi"], Bbox) and kwargs["aoi"].crs == image.metadata["crs"]
    assert frame.attrs["aoi"] == window
    assert frame.attrs["tiles_run"] == expected
    assert scene.tiles == scene.tiles_done == len(expected)
    assert set(frame["tile"]) <= set(expected)
    assert f"in {len(expected)} tiles" in scene.status.value

    panel.where.value = WHOLE  # the region is kept but not used
    ui.run(scene, scene.run_button)
    kwargs, frame = spy.calls[-1]
    assert kwargs["aoi"] is None and len(frame.attrs["tiles_run"]) == len(grid) == scene.tiles

    panel.where.value = REGION
    scene.file.value = scene_file  # a file, not the layer the region is drawn over: said so
    calls = len(spy.calls)
    ui.click(scene.run_button)
    assert "instead of a scene file" in scene.status.value and len(spy.calls) == calls

    # The Scene widget on its own: its Region layer limits the run the same way.
    alone = _widget(viewer)
    alone.region.value = region
    ui.run(alone, alone.run_button)
    kwargs, frame = spy.calls[-1]
    assert frame.attrs["tiles_run"] == expected and alone.tiles == len(expected)

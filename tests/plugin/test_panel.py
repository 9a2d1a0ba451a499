"""The SAM3 panel driven as an analyst drives it: real layers, real clicks, the tiny model.

The random weights make masks meaningless, so each test compares what the panel shows with what
the library returns for the same image and prompt.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari

STACK = "T33UUU_20170216T102101"
SOURCE = f"{STACK} B04 (B04, B03, B02)"


@pytest.fixture
def panel(s2_viewer, connected):
    _dock, widget = s2_viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    widget.image.value = s2_viewer.layers[f"{STACK} B04"]
    return widget


class Spy:
    """Counts calls of a method (the real method still runs)."""

    def __init__(self, monkeypatch, owner, name: str) -> None:
        self.calls = 0
        real = getattr(owner, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


def test_keywords_share_one_multi_call_and_match_the_library(
    panel, connected, s2_rgb_files, ui, monkeypatch
):
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.raster import read_raster

    viewer = panel.viewer
    text = panel.mode("Text & exemplars")
    multi, segment = Spy(monkeypatch, connected, "multi"), Spy(monkeypatch, connected, "segment")
    text.keywords.value = "building\nroad, field\nroad"
    panel.score_thr.value = 0.0
    ui.run(text, text.run_button)
    assert (multi.calls, segment.calls) == (1, 0), "several keywords: one multi call"
    names = [layer.name for layer in viewer.layers][-3:]
    assert names == ["SAM3 building", "SAM3 road", "SAM3 field"]
    frame = connected.multi(read_raster(s2_rgb_files), ["building", "road", "field"], score_thr=0.0)
    colours = {}
    for keyword in ("building", "road", "field"):
        layer = viewer.layers[f"SAM3 {keyword}"]
        part = frame[frame["keyword"] == keyword].reset_index(drop=True)
        assert len(part) > 0
        labels = masks_to_labels(part, (768, 1536))
        np.testing.assert_array_equal(layer.data, labels)
        features = layer.features
        assert features["keyword"].tolist() == [keyword] * len(part)
        np.testing.assert_allclose(features["score"], part["score"], rtol=1e-6)
        np.testing.assert_array_equal(
            features["area"], [np.count_nonzero(labels == i) for i in features["index"]]
        )
        assert set(features["source"]) == {SOURCE} and set(features["prompt_kind"]) == {"text"}
        # One colour per keyword: every label of the layer painted in it.
        shown = {tuple(np.round(layer.colormap.map(int(i)), 3)) for i in features["index"]}
        assert len(shown) == 1
        colours[keyword] = shown.pop()
    assert len(set(colours.values())) == 3, "each keyword its own colour"
    counts = frame["keyword"].value_counts()
    assert text.status.value.startswith(
        f"building: {counts['building']}, road: {counts['road']}, field: {counts['field']} "
        "-> 3 layer(s)"
    ), text.status.value
    assert text.status.value.endswith("(features cached)") or text.status.value.endswith(
        "(image encoded)"
    )
    ui.run(text, text.run_button)  # the same image again: its features are held
    assert text.status.value.endswith("(features cached)"), text.status.value


def test_one_keyword_on_any_band_is_one_segment_call_on_the_images_pixels(
    panel, s2_viewer, connected, s2_rgb_files, ui, monkeypatch
):
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.widgets._layers import FEATURE_COLUMNS

    viewer = s2_viewer
    image = viewer.layers[f"{STACK} B03"]
    panel.image.value = image  # any band of the stack chooses the scene: B04, B03, B02
    assert panel.image.value is viewer.layers[f"{STACK} B04"]
    text = panel.mode("Text & exemplars")
    text.keywords.value = "building"
    panel.score_thr.value = 0.0
    panel.max_det.value = 20
    multi, segment = Spy(monkeypatch, connected, "multi"), Spy(monkeypatch, connected, "segment")
    before = len(viewer.layers)
    ui.run(text, text.run_button)
    assert (multi.calls, segment.calls) == (0, 1), "one keyword: one segment call"

    assert len(viewer.layers) == before + 1
    layer = viewer.layers[-1]
    assert layer.name == "SAM3 building"
    assert layer.data.shape == (768, 1536) and layer.data.dtype == np.int32
    frame = connected.segment(
        read_raster(s2_rgb_files), prompt="building", score_thr=0.0, max_det=20
    )
    assert len(frame) >= 1
    np.testing.assert_array_equal(layer.data, masks_to_labels(frame, (768, 1536)))
    features = layer.features
    assert list(features.columns) == [*FEATURE_COLUMNS, "object"]
    assert features["index"].tolist() == list(range(1, len(frame) + 1))
    np.testing.assert_allclose(features["score"], frame["score"], rtol=1e-6)
    assert set(features["keyword"]) == {"building"} and set(features["prompt_kind"]) == {"text"}
    assert set(features["source"]) == {SOURCE}
    # On the image's pixels, with its georeferencing.
    np.testing.assert_allclose(layer.scale, image.scale)
    np.testing.assert_allclose(layer.translate, image.translate)
    assert layer.metadata["crs"] == "EPSG:32633"
    assert layer.metadata["transform"] == image.metadata["transform"]
    record = layer.metadata["sam3"]
    assert (record["version"], record["kind"], record["offset"]) == (1, "result", [0, 0])
    assert record["image_layer"] == panel.image.value.name  # the scene's first band layer
    assert text.status.value.startswith(f"building: {len(frame)} -> 1 layer(s)")


def test_keywords_in_one_layer_keep_the_librarys_order(panel, connected, s2_rgb_files, ui):
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.widgets.text import ONE_LAYER

    viewer = panel.viewer
    text = panel.mode("Text & exemplars")
    text.keywords.value = "building, road"
    text.output.value = ONE_LAYER
    panel.score_thr.value = 0.0
    panel.max_det.value = 10
    before = len(viewer.layers)
    ui.run(text, text.run_button)
    assert len(viewer.layers) == before + 1
    layer = viewer.layers[-1]
    assert layer.name == "SAM3 building, road"
    # The same objects as the library's call, both keywords' rows in one table, painted in order.
    frame = connected.multi(
        read_raster(s2_rgb_files), ["building", "road"], score_thr=0.0, max_det=10
    )
    assert set(frame["keyword"]) == {"building", "road"}
    assert layer.features["keyword"].tolist() == frame["keyword"].tolist()
    assert layer.features["index"].tolist() == list(range(1, len(frame) + 1))
    np.testing.assert_allclose(layer.features["score"], frame["score"], rtol=1e-6)
    np.testing.assert_array_equal(layer.data, masks_to_labels(frame, (768, 1536)))


def test_more_keywords_than_one_request_holds_run_in_several(panel, connected, ui, monkeypatch):
    viewer = panel.viewer
    text = panel.mode("Text & exemplars")
    limit = connected.manifest.max_keywords
    words = [f"word{i}" for i in range(limit + 1)]
    multi = Spy(monkeypatch, connected, "multi")
    text.keywords.value = ", ".join(words)
    panel.score_thr.value = 0.0
    ui.run(text, text.run_button)
    assert multi.calls == 2, "the Query's keywords split into requests of the model's size"
    assert [layer.name for layer in viewer.layers][-len(words) :] == [f"SAM3 {w}" for w in words]


def test_library_errors_from_the_worker_are_notified(panel, connected, sam3_repository, ui):
    from napari_sam3.client.sam3 import Sam3Client
    from napari_sam3.plugin.widgets._common import STATE

    closed = Sam3Client.local(sam3_repository, precision="fp32")
    # The model call in the worker thread fails with a RuntimeError: superqt's generator worker
    # dropped those without a signal, and the tab waited forever.
    closed.close()
    STATE.set_client(closed)
    try:
        viewer = panel.viewer
        text = panel.mode("Text & exemplars")
        text.keywords.value = "building"
        before = len(viewer.layers)
        ui.click(text.run_button)
        ui.wait(text)
        assert "is closed; make a new Sam3Client" in text.status.value
        assert "make a new Sam3Client" in str(ui.last_notification().message)
        assert len(viewer.layers) == before
    finally:
        STATE.set_client(connected)


def test_score_threshold_refilters_in_place_without_a_model_call(
    panel, s2_viewer, connected, s2_rgb_files, ui, monkeypatch
):
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.raster import read_raster

    viewer = s2_viewer  # the real viewer (the panel sees napari's public-only proxy of it)
    text = panel.mode("Text & exemplars")
    text.keywords.value = "building"
    panel.score_thr.value = 0.0
    panel.max_det.value = 20
    panel.dedup.value = 0.0  # off: more candidates to filter
    ui.run(text, text.run_button)
    layer = viewer.layers["SAM3 building"]
    raster = read_raster(s2_rgb_files)
    options = {"prompt": "building", "max_det": 20, "dedup": None}
    full = connected.segment(raster, score_thr=0.0, **options)
    assert len(full) > 2
    np.testing.assert_array_equal(layer.data, masks_to_labels(full, (768, 1536)))
    # A threshold between the scores keeps some, not all.
    scores = np.sort(np.asarray(full["score"], np.float64))
    thr = float(scores[len(full) // 2 - 1] + scores[len(full) // 2]) / 2
    infer = Spy(monkeypatch, connected.engine, "infer")
    panel.score_thr.value = thr
    thr = float(panel.score_thr.value)  # as the control holds it (2 decimals)
    assert infer.calls == 0, "re-filtering runs no model"
    assert viewer.layers["SAM3 building"] is layer, "updated in place, no new layer"
    expected = connected.segment(raster, score_thr=thr, **options)
    assert 0 < len(expected) < len(full)
    np.testing.assert_array_equal(layer.data, masks_to_labels(expected, (768, 1536)))
    np.testing.assert_allclose(layer.features["score"], expected["score"], rtol=1e-6)


def test_where_current_view_and_selected_region(panel, connected, s2_rgb_files, ui, qtbot):
    from napari_sam3.plugin.widgets._fields import REGION, VIEW
    from napari_sam3.plugin.widgets._layers import view_window

    viewer = panel.viewer
    image = panel.image.value
    viewer.window._qt_viewer.canvas.native.resize(600, 400)
    viewer.camera.center = tuple(image.data_to_world((300, 500)))
    viewer.camera.zoom = 4.0 / float(image.scale[-1])
    qtbot.wait(50)
    window = view_window(viewer, image)
    r0, r1, c0, c1 = window
    assert 0 < r0 < 300 < r1 < 768 and 0 < c0 < 500 < c1 < 1536, window
    text = panel.mode("Text & exemplars")
    text.keywords.value = "field"
    panel.score_thr.value = 0.0
    panel.where.value = VIEW
    ui.run(text, text.run_button)
    layer = viewer.layers["SAM3 field"]
    assert layer.data.shape == (r1 - r0, c1 - c0)
    assert layer.metadata["sam3"]["offset"] == [r0, c0]
    np.testing.assert_allclose(layer.data_to_world((0, 0)), image.data_to_world((r0, c0)))

    panel.where.value = REGION  # no region layer chosen: said so, nothing added
    before = len(viewer.layers)
    ui.click(text.run_button)
    assert "choose the Shapes layer" in text.status.value and len(viewer.layers) == before
    region = viewer.add_shapes(name="region", ndim=2)
    corner = np.array(image.data_to_world((200, 300)))
    far = np.array(image.data_to_world((455, 811)))
    region.add_rectangles(np.array([corner - 5.0, far + 5.0]))  # pixel edges: rows 200..455
    panel.region.value = region
    ui.run(text, text.run_button)
    layer = viewer.layers[-1]
    assert layer.data.shape == (256, 512)
    assert layer.metadata["sam3"]["offset"] == [200, 300]
    np.testing.assert_allclose(layer.data_to_world((0, 0)), image.data_to_world((200, 300)))
    assert layer.metadata["transform"] == [10.0, 0.0, 333000.0, 0.0, -10.0, 5820040.0]
    # The model got the crop's pixels with the whole scene's stretch (as the canvas shows it).
    np.testing.assert_array_equal(
        layer.data, _crop_labels(viewer, connected, s2_rgb_files, "field", (200, 300), (256, 512))
    )


def _crop_labels(viewer, client, files, prompt, offset, shape):
    """What the library gives for `prompt` on the crop of `files` at `offset` of `shape`, stretched
    as the viewer's band layers record it (the whole scene's stretch, not the crop's)."""
    from napari_sam3.client.sam3 import PreparedImage
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.letterbox import Letterbox
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.imagery.stretch import StretchStats, to_model_rgb

    (r0, c0), (rows, cols) = offset, shape
    crop = read_raster(files, window=np.s_[r0 : r0 + rows, c0 : c0 + cols])
    bands = ("B04", "B03", "B02")
    stretch = [viewer.layers[f"{STACK} {b}"].metadata["sam3"]["stretch"] for b in bands]
    stats = StretchStats(
        low=tuple(s["low"] for s in stretch),
        high=tuple(s["high"] for s in stretch),
        band_names=bands,
    )
    rgb = to_model_rgb(crop, stats=stats)
    box = Letterbox(rgb.shape[:2], client.image_size)
    frame = client.segment(PreparedImage(rgb, box, box.apply(rgb)), prompt=prompt, score_thr=0.0)
    return masks_to_labels(frame, shape)


def test_concepts_apply_through_one_multi_call(panel, connected, s2_rgb_files, ui, monkeypatch):
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.raster import read_raster

    viewer = panel.viewer
    concepts = panel.mode("Concepts")
    ui.click(concepts.new_exemplars)
    ui.click(concepts.new_exemplars)  # idempotent: still one exemplar layer
    exemplars = panel.exemplars.value
    assert [layer.name for layer in viewer.layers].count("SAM3 exemplars") == 1
    exemplars.add_rectangles(np.array([[100.0, 200.0], [150.0, 260.0]]))
    concepts.name.value = "greenhouse"
    ui.run(concepts, concepts.encode_button)
    exemplars.add_rectangles(np.array([[300.0, 600.0], [340.0, 650.0]]))
    concepts.name.value = "pond"
    ui.run(concepts, concepts.encode_button)
    assert list(concepts.bank) == ["greenhouse", "pond"]
    concepts.concepts.value = ["greenhouse", "pond"]
    multi, segment = Spy(monkeypatch, connected, "multi"), Spy(monkeypatch, connected, "segment")
    panel.score_thr.value = 0.0
    ui.run(concepts, concepts.apply_button)
    assert (multi.calls, segment.calls) == (1, 0), "two concepts, one vision pass"
    named = [(n, concepts.bank[n]) for n in ("greenhouse", "pond")]
    expected = connected.multi(read_raster(s2_rgb_files), concepts=named, score_thr=0.0)
    for name in ("greenhouse", "pond"):
        layer = viewer.layers[f"SAM3 concept {name}"]
        part = expected[expected["keyword"] == name].reset_index(drop=True)
        assert len(part) > 0
        np.testing.assert_array_equal(layer.data, masks_to_labels(part, (768, 1536)))
        assert set(layer.features["prompt_kind"]) == {"concept"}


def test_concept_bank_encode_save_load_and_apply_to_another_image(
    panel, connected, s2_files, ui, tmp_path
):
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.prompts.concept import Concept

    viewer = panel.viewer
    (nir,) = viewer.open(str(s2_files["B8A"]), plugin="napari-sam3")  # 20 m, another layer
    assert panel.image.value is nir, "opened, it is selected, and the picker follows"
    panel.image.value = viewer.layers[f"{STACK} B04"]
    concepts = panel.mode("Concepts")
    ui.click(concepts.new_exemplars)
    exemplars = panel.exemplars.value
    exemplars.add_rectangles(np.array([[100.0, 200.0], [150.0, 260.0]]))
    exemplars.add_rectangles(np.array([[300.0, 600.0], [340.0, 650.0]]))
    panel.negative.value = True
    exemplars.add_rectangles(np.array([[500.0, 900.0], [540.0, 960.0]]))
    concepts.name.value = "greenhouse"
    ui.run(concepts, concepts.encode_button)

    assert list(concepts.bank) == ["greenhouse"]
    concept = concepts.bank["greenhouse"]
    assert (concept.n_positive, concept.n_negative) == (2, 1)
    assert concept.model_id == connected.model_id
    assert concepts.concepts.value == ["greenhouse"]
    assert "greenhouse: 2+ / 1-" in concepts.concepts.native.item(0).text()

    path = tmp_path / "greenhouse.npz"
    concepts.save_path.value = path
    ui.click(concepts.save_button)
    assert concepts.last_error is None, concepts.status.value
    assert Concept.load(path).n_positive == 2
    ui.click(concepts.save_button)  # exists and Overwrite is off: refused, said so
    assert "exists" in concepts.status.value

    ui.click(concepts.remove_button)
    assert concepts.bank == {}
    concepts.load_path.value = path
    ui.click(concepts.load_button)
    assert list(concepts.bank) == ["greenhouse"]

    panel.image.value = nir  # apply elsewhere: choose that image in the panel
    panel.score_thr.value = 0.0
    ui.run(concepts, concepts.apply_button)
    layer = viewer.layers[-1]
    assert layer.name == "SAM3 concept greenhouse"
    assert layer.data.shape == nir.data.shape == (384, 768)
    np.testing.assert_allclose(layer.scale, (20.0, 20.0))
    expected = connected.segment(
        connected.prepare(read_raster(nir.metadata["source"])),
        concept=concepts.bank["greenhouse"],
        score_thr=0.0,
    )
    assert len(expected) > 0, "score_thr=0 keeps the concept's candidates"
    np.testing.assert_array_equal(layer.data, masks_to_labels(expected, (384, 768)))
    assert layer.features["prompt_kind"].tolist() == ["concept"] * len(expected)
    assert layer.features["keyword"].tolist() == ["greenhouse"] * len(expected)


def test_accept_twice_with_the_analysts_labels_as_seed_keeps_every_label(panel, ui):
    from napari_sam3.plugin.widgets._layers import placement

    viewer = panel.viewer
    inter = panel.mode("Interactive")
    image = panel.image.value
    mine = np.zeros((768, 1536), np.int32)
    mine[100:160, 700:780] = 3
    mine[400:420, 100:140] = 9
    own = viewer.add_labels(mine.copy(), name="my labels", **placement(image))
    ui.click(inter.prompt_layers_button)
    ui.click(inter.prompt_layers_button)  # idempotent: one set of prompt layers
    for name in ("SAM3 clicks", "SAM3 box", "SAM3 seed"):
        assert [layer.name for layer in viewer.layers].count(name) == 1
    inter.seed.value = own
    inter.target.value = own  # accepted into the analyst's layer too: added, never over theirs
    accepted = []
    for candidate in (0, 1):
        ui.click(inter.seed_button)
        ui.wait(inter)
        assert inter.last_error is None, inter.status.value
        inter.candidate.value = candidate
        ui.click(inter.accept_button)
        assert inter.last_error is None, inter.status.value
        accepted.append(int(own.data.max()))
        np.testing.assert_array_equal(own.data[mine > 0], mine[mine > 0])
        assert ui.label_ids(own) == {3, 9, *accepted}
    assert accepted == [10, 11]
    ui.click(inter.reset_button)
    np.testing.assert_array_equal(own.data[mine > 0], mine[mine > 0])


def test_scene_tab_shows_progress_in_the_activity_dock(
    make_napari_viewer, connected, ui, tmp_path, s2_crop, qtbot
):
    import rasterio
    from napari.utils import progress

    path = tmp_path / "s2_crop.tif"
    count, rows, cols = s2_crop.data.shape
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=cols,
        height=rows,
        count=count,
        dtype=s2_crop.data.dtype,
        crs=s2_crop.crs,
        transform=s2_crop.transform,
    ) as dst:
        dst.write(s2_crop.data)
    viewer = make_napari_viewer()
    viewer.open(str(path), plugin="napari-sam3")
    _dock, panel = viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    panel.image.value = viewer.layers[0]
    scene = panel.mode("Scene")
    scene.prompt.value = "building"
    scene.tile_size.value, scene.overlap.value = 160, 32
    panel.score_thr.value = 0.0
    ui.click(scene.run_button)
    active = [p for p in progress._all_instances if str(p.desc).startswith("SAM3: Segmenting")]
    assert active, "the run is listed in napari's activity dock"
    ui.wait(scene)
    assert scene.last_error is None, scene.status.value
    assert active[0].total == scene.tiles > 1 and active[0].n == scene.tiles
    assert viewer.layers[-1].name == "SAM3 scene building"


def test_closing_the_panel_mid_run_cancels_it(panel, ui, qtbot):
    from qtpy.QtCore import QThreadPool

    viewer = panel.viewer
    text = panel.mode("Text & exemplars")
    text.keywords.value = "building, road"
    before = [layer.name for layer in viewer.layers]
    ui.click(text.run_button)
    assert text.job.running
    viewer.window.remove_dock_widget(panel.native.parent())
    qtbot.wait(50)
    QThreadPool.globalInstance().waitForDone(120_000)
    qtbot.wait(100)
    assert [layer.name for layer in viewer.layers] == before, "no layer, not even half-built"


def test_every_contributed_widget_docks(make_napari_viewer, qtbot):
    from npe2 import PluginManager

    manifest = PluginManager.instance().get_manifest("napari-sam3")
    viewer = make_napari_viewer(show=True)
    names = [w.display_name for w in manifest.contributions.widgets]
    assert "SAM3" in names and "Results" in names
    for name in names:
        dock, widget = viewer.window.add_plugin_dock_widget("napari-sam3", name)
        qtbot.wait(20)
        assert dock.isVisible() and widget.native.isVisible(), name


def test_exemplar_boxes_positive_and_negative_without_keywords(panel, connected, s2_rgb_files, ui):
    from napari_sam3.gis.vector import masks_to_labels
    from napari_sam3.imagery.raster import read_raster

    viewer = panel.viewer
    text = panel.mode("Text & exemplars")
    ui.click(panel.new_exemplars)
    exemplars = panel.exemplars.value
    assert exemplars.name == "SAM3 exemplars"
    assert [layer.name for layer in viewer.layers].count("SAM3 exemplars") == 1
    exemplars.add_rectangles(np.array([[100.0, 200.0], [150.0, 260.0]]))
    panel.negative.value = True
    exemplars.add_rectangles(np.array([[400.0, 900.0], [440.0, 980.0]]))
    assert exemplars.features["positive"].tolist() == [True, False]
    panel.score_thr.value = 0.0
    ui.run(text, text.run_button)
    layer = viewer.layers[-1]
    assert layer.name == "SAM3 visual query"
    boxes = [[200.5, 100.5, 260.5, 150.5], [900.5, 400.5, 980.5, 440.5]]
    frame = connected.segment(
        read_raster(s2_rgb_files), exemplar_boxes=boxes, exemplar_labels=[1, 0], score_thr=0.0
    )
    assert len(frame) > 0
    np.testing.assert_array_equal(layer.data, masks_to_labels(frame, (768, 1536)))
    assert layer.features["prompt_kind"].tolist() == ["exemplar"] * len(frame)

    text.keywords.value = "building, road"  # boxes go with one keyword at most: said so
    before = len(viewer.layers)
    ui.click(text.run_button)
    assert "exemplar boxes go with one keyword at most, got 2" in text.status.value
    assert len(viewer.layers) == before


def test_errors_are_notifications_and_cancel_frees_the_panel(s2_viewer, sam3_client, ui, qtbot):
    from qtpy.QtCore import QThreadPool

    from napari_sam3.plugin.widgets._common import STATE

    _dock, panel = s2_viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    assert not panel.connection.native.isHidden(), "not connected: the connection shows"
    text = panel.mode("Text & exemplars")
    text.keywords.value = "building"
    before = len(s2_viewer.layers)
    ui.click(text.run_button)
    assert "Not connected" in text.status.value
    note = ui.last_notification()
    assert "Not connected" in str(note.message) and note.severity == "error"
    assert not hasattr(note, "exception"), "an error notification, not a traceback"

    STATE.set_client(sam3_client)
    assert "RANDOM WEIGHTS" in panel.model.value
    assert panel.connection.native.isHidden(), "connected: folded away"
    text.keywords.value = "  ,  "
    ui.click(text.run_button)
    assert "type a keyword, or draw exemplar boxes" in text.status.value

    assert len(s2_viewer.layers) == before

    text.keywords.value = "building"
    ui.click(text.run_button)
    assert text.job.running and not text.run_button.enabled
    assert not text.progress.native.isHidden() and not text.cancel_button.native.isHidden()
    ui.click(text.cancel_button)
    assert not text.job.running and text.run_button.enabled and "cancelled" in text.status.value
    assert text.progress.native.isHidden() and text.cancel_button.native.isHidden()
    QThreadPool.globalInstance().waitForDone(120_000)
    qtbot.wait(50)
    assert len(s2_viewer.layers) == before

"""The Multi-keyword and Concepts widgets on the embedded engine (tiny random-weight model)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.napari

STACK = "T33UUU_20170216T102101"


def _dock(viewer, widget):
    viewer.window.add_dock_widget(widget, name=type(widget).__name__)
    return widget


def test_keywords_one_layer_each(s2_viewer, connected, s2_rgb_files, ui):
    from napari_sam3.gis import masks_to_labels
    from napari_sam3.raster import read_raster
    from napari_sam3.widgets import MultiKeywordWidget

    viewer = s2_viewer
    widget = _dock(viewer, MultiKeywordWidget(viewer))
    widget.image.value = viewer.layers[f"{STACK} B04"]
    widget.keywords.value = "building\nroad, field\nroad"
    widget.score_thr.value = 0.0
    ui.run(widget, widget.run_button)

    names = [layer.name for layer in viewer.layers][-3:]
    assert names == ["SAM3 building", "SAM3 road", "SAM3 field"]
    frame = connected.multi(read_raster(s2_rgb_files), ["building", "road", "field"], score_thr=0.0)
    for keyword in ("building", "road", "field"):
        layer = viewer.layers[f"SAM3 {keyword}"]
        part = frame[frame["keyword"] == keyword].reset_index(drop=True)
        assert len(part) > 0, f"score_thr=0 keeps candidates of {keyword!r}"
        np.testing.assert_array_equal(layer.data, masks_to_labels(part, (768, 1536)))
        assert layer.features["keyword"].tolist() == [keyword] * len(part)
        np.testing.assert_allclose(layer.features["score"], part["score"], rtol=1e-6)
    counts = frame["keyword"].value_counts()
    assert widget.status.value.startswith(
        f"building: {counts['building']}, road: {counts['road']}, field: {counts['field']}"
    )


def test_keywords_in_one_layer(s2_viewer, connected, s2_rgb_files, ui):
    from napari_sam3.gis import masks_to_labels
    from napari_sam3.raster import read_raster
    from napari_sam3.widgets import MultiKeywordWidget
    from napari_sam3.widgets.multi import ONE_LAYER

    viewer = s2_viewer
    widget = _dock(viewer, MultiKeywordWidget(viewer))
    widget.image.value = viewer.layers[f"{STACK} B04"]
    widget.keywords.value = "building, road"
    widget.output.value = ONE_LAYER
    widget.score_thr.value = 0.0
    widget.max_det.value = 10
    before = len(viewer.layers)
    ui.run(widget, widget.run_button)
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


def test_library_errors_from_the_worker_are_notified(s2_viewer, connected, ui):
    from napari_sam3.widgets import MultiKeywordWidget

    viewer = s2_viewer
    widget = _dock(viewer, MultiKeywordWidget(viewer))
    widget.keywords.value = ", ".join(f"word{i}" for i in range(9))
    before = len(viewer.layers)
    ui.click(widget.run_button)
    ui.wait(widget)
    assert "at most 8 keywords and concepts per call, got 9" in widget.status.value
    assert "at most 8 keywords" in str(ui.last_notification().message)
    assert len(viewer.layers) == before


def test_concept_bank_encode_save_load_apply(s2_viewer, connected, s2_files, ui, tmp_path):
    from napari_sam3.concept import Concept
    from napari_sam3.widgets import ConceptsWidget

    viewer = s2_viewer
    (nir,) = viewer.open(str(s2_files["B8A"]), plugin="napari-sam3")  # 20 m, another layer
    widget = _dock(viewer, ConceptsWidget(viewer))
    widget.image.value = viewer.layers[f"{STACK} B04"]
    ui.click(widget.new_exemplars)
    exemplars = widget.exemplars.value
    exemplars.add_rectangles(np.array([[100.0, 200.0], [150.0, 260.0]]))
    exemplars.add_rectangles(np.array([[300.0, 600.0], [340.0, 650.0]]))
    widget.negative.value = True
    exemplars.add_rectangles(np.array([[500.0, 900.0], [540.0, 960.0]]))
    widget.name.value = "greenhouse"
    ui.run(widget, widget.encode_button)

    assert list(widget.bank) == ["greenhouse"]
    concept = widget.bank["greenhouse"]
    assert (concept.n_positive, concept.n_negative) == (2, 1)
    assert concept.model_id == connected.model_id
    assert widget.concepts.value == ["greenhouse"]
    assert "greenhouse: 2+ / 1-" in widget.concepts.native.item(0).text()

    path = tmp_path / "greenhouse.npz"
    widget.save_path.value = path
    ui.click(widget.save_button)
    assert widget.last_error is None, widget.status.value
    assert Concept.load(path).n_positive == 2
    ui.click(widget.save_button)  # exists and Overwrite is off: refused, said so
    assert "exists" in widget.status.value

    ui.click(widget.remove_button)
    assert widget.bank == {}
    widget.load_path.value = path
    ui.click(widget.load_button)
    assert list(widget.bank) == ["greenhouse"]

    widget.apply_image.value = nir
    widget.score_thr.value = 0.0
    ui.run(widget, widget.apply_button)
    layer = viewer.layers[-1]
    assert layer.name == "SAM3 concept greenhouse"
    assert layer.data.shape == nir.data.shape == (384, 768)
    np.testing.assert_allclose(layer.scale, (20.0, 20.0))
    expected = connected.segment(
        _prepared_single(connected, nir), concept=widget.bank["greenhouse"], score_thr=0.0
    )
    from napari_sam3.gis import masks_to_labels

    assert len(expected) > 0, "score_thr=0 keeps the concept's candidates"
    np.testing.assert_array_equal(layer.data, masks_to_labels(expected, (384, 768)))
    assert layer.features["prompt_kind"].tolist() == ["concept"] * len(expected)
    assert layer.features["keyword"].tolist() == ["greenhouse"] * len(expected)


def _prepared_single(client, layer):
    from napari_sam3.raster import read_raster

    return client.prepare(read_raster(layer.metadata["source"]))

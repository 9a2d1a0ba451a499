"""The results table: sort, click to zoom, delete rejected objects, merge kept ones, export."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.napari

STACK = "T33UUU_20170216T102101"


@pytest.fixture
def results(s2_viewer, connected, ui):
    """The panel's one-layer result for two keywords, and the results table, both docked."""
    from napari_sam3.plugin.widgets.text import ONE_LAYER

    viewer = s2_viewer
    _dock, panel = viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    _dock, table = viewer.window.add_plugin_dock_widget("napari-sam3", "Results")
    panel.image.value = viewer.layers[f"{STACK} B04"]
    text = panel.mode("Text & exemplars")
    text.keywords.value = "building, road"
    text.output.value = ONE_LAYER
    panel.score_thr.value = 0.0
    panel.max_det.value = 6
    panel.dedup.value = 0.0
    ui.run(text, text.run_button)
    layer = viewer.layers["SAM3 building, road"]
    assert len(layer.features) >= 4
    return panel, table, layer


# Scores the table must order by value: among others, three pairs that show the same four
# decimals, each listed larger first (a sort by the shown value keeps that wrong order).
SCORES = (0.50196499, 0.7, 0.50196183, 0.30000009, 0.30000001, 0.05, 0.9, 0.12340007, 0.1234)


def click_header(table, column: int, qtbot) -> None:
    from qtpy.QtCore import QPoint, Qt

    header = table.table.horizontalHeader()
    where = QPoint(header.sectionViewportPosition(column) + 5, header.height() // 2)
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=where)


def test_table_lists_sorts_and_zooms(results, qtbot, ui):
    from qtpy.QtCore import Qt

    panel, table, layer = results
    viewer = panel.viewer
    scores = np.resize(SCORES, len(layer.features))
    layer.features = layer.features.assign(score=scores)  # the table follows the layer
    rows = table.shown_rows()
    assert len(rows) == len(layer.features)
    assert rows["index"].tolist() == layer.features["index"].tolist()
    np.testing.assert_array_equal(rows["score"], scores)
    assert set(rows["keyword"]) == {"building", "road"}
    assert set(rows["image"]) == {f"{STACK} B04"}
    shown_text = [float(table.table.item(r, 3).text()) for r in range(len(rows))]
    assert shown_text == [round(s, 4) for s in scores]  # shown to four decimals
    # A click on the Score header sorts by the exact value, another click the other way.
    header = table.table.horizontalHeader()
    orders = set()
    for _click in range(2):
        click_header(table, 3, qtbot)
        assert header.sortIndicatorSection() == 3
        descending = header.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
        expected = np.sort(scores)[::-1] if descending else np.sort(scores)
        np.testing.assert_array_equal(table.shown_rows()["score"], expected)
        orders.add(descending)
    assert orders == {False, True}
    # Click a row: its object is selected and the canvas centred on it.
    pick = max(ui.label_ids(layer))
    table.select(layer.name, pick)
    assert layer.selected_label == pick
    rr, cc = np.nonzero(layer.data == pick)
    centre = layer.data_to_world(((rr.min() + rr.max()) / 2, (cc.min() + cc.max()) / 2))
    np.testing.assert_allclose(viewer.camera.center[-2:], centre, atol=abs(layer.scale[-1]))


def test_delete_rejected_then_refilter_keeps_them_out(results, ui):
    panel, table, layer = results
    before = layer.features["index"].tolist()
    gone = before[1]
    table.select(layer.name, gone)
    ui.click(table.delete_button)
    assert table.last_error is None, table.status.value
    assert gone not in layer.features["index"].tolist()
    assert not np.any(layer.data == gone)
    assert len(table.shown_rows()) == len(before) - 1
    layer.undo()  # the pixels come back through napari's undo
    assert np.any(layer.data == gone)
    layer.redo()
    panel.score_thr.value = 0.01  # re-filter: the rejected object stays out
    assert len(layer.features) <= len(before) - 1
    kept_objects = set(layer.features["object"])
    rejected = set(layer.metadata["sam3"]["rejected"])
    assert rejected and not kept_objects & rejected


def test_merge_never_overwrites_and_undoes_in_one_step(results, ui):
    from napari_sam3.plugin.widgets._layers import placement

    panel, table, layer = results
    viewer = panel.viewer
    image = panel.image.value
    mine = np.zeros((768, 1536), np.int32)
    mine[layer.data > 0] = 0
    ys, xs = np.nonzero(layer.data > 0)
    mine[ys[: len(ys) // 2], xs[: len(xs) // 2]] = 5  # the analyst's label under some results
    own = viewer.add_labels(mine.copy(), name="my labels", **placement(image))
    table.target.value = own
    ui.click(table.merge_button)  # nothing selected: every row
    assert table.last_error is None, table.status.value
    np.testing.assert_array_equal(own.data[mine == 5], 5)
    ids = ui.label_ids(own) - {5}
    assert ids == set(range(6, 6 + len(ids))) and len(ids) >= 1
    for new_id in ids:  # each new object is its result object, minus the analyst's pixels
        row = own.features[own.features["index"] == new_id].iloc[0]
        assert row["keyword"] in {"building", "road"}
        assert row["area"] == np.count_nonzero(own.data == new_id)
    assert own.metadata["crs"] == "EPSG:32633"
    own.undo()  # one step takes the whole merge back
    np.testing.assert_array_equal(own.data, mine)


def test_export_all_and_selection_with_attributes(results, tmp_path, ui):
    import geopandas as gpd

    panel, table, layer = results
    # an object wholly under better-scored ones shows no pixel: no polygon, dropped and counted
    shown = layer.features[layer.features["area"] > 0]
    hidden = len(layer.features) - len(shown)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = table.export(tmp_path / "all.gpkg")
    assert table.last_error is None, table.status.value
    said = " ".join(str(w.message) for w in caught)
    assert (f"{hidden} dropped (empty" in said) if hidden else ("dropped" not in said)
    gdf = gpd.read_file(written[0])
    assert len(gdf) == len(shown) and gdf.geometry.is_valid.all()
    assert gdf.crs.to_epsg() == 32633
    assert sorted(gdf["keyword"]) == sorted(shown["keyword"])
    np.testing.assert_allclose(sorted(gdf["score"]), sorted(shown["score"]), rtol=1e-5)
    pick = int(shown["index"].iloc[0])
    table.select(layer.name, pick)
    written = table.export(tmp_path / "one.geojson", selection_only=True)
    one = gpd.read_file(written[0])
    assert len(one) == 1 and one["area_px"].iloc[0] == np.count_nonzero(layer.data == pick)
    written = table.export(tmp_path / "one.shp", selection_only=True)
    assert table.last_error is None, table.status.value
    shp = gpd.read_file(written[0])
    assert len(shp) == 1 and shp.crs.to_epsg() == 32633
    table.export(tmp_path / "all.gpkg")  # exists: refused, said so, file untouched
    assert "exists" in table.status.value


def test_a_result_whose_image_was_deleted_stays_listed(results):
    panel, table, layer = results
    viewer = panel.viewer
    n = len(table.shown_rows())
    for band in ("B04", "B03", "B02"):
        viewer.layers.remove(f"{STACK} {band}")
    rows = table.shown_rows()
    assert len(rows) == n
    assert set(rows["image"]) == {f"image layer '{STACK} B04' deleted"}
    assert "kept" in table.status.value


def test_accept_and_merge_paint_one_way_and_each_undoes_exactly(results, ui, monkeypatch):
    """Accept (Interactive) and Merge (this table) write into the analyst's labels through the
    same painter: new ids after the layer's largest, never over the analyst's labels, the whole
    write one step of napari's undo history; Undo accept keeps what was painted since."""
    from napari_sam3.plugin.widgets import _layers
    from napari_sam3.plugin.widgets._layers import placement

    panel, table, layer = results
    viewer = panel.viewer
    image = panel.image.value
    painted_into = []
    real = _layers.paint_new_labels

    def spy(target, *args, **kwargs):
        painted_into.append(target.name)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(_layers, "paint_new_labels", spy)

    inter = panel.mode("Interactive")
    ui.click(inter.prompt_layers_button)
    seed = inter.seed.value

    def candidate() -> np.ndarray:
        rr, cc = np.mgrid[100:140, 600:660]
        seed.data_setitem((rr.ravel(), cc.ravel()), 1)  # the analyst paints a seed
        ui.click(inter.seed_button)
        ui.wait(inter)
        assert inter.last_error is None, inter.status.value
        mask = inter.candidate_mask()
        assert mask is not None and mask.any()
        return mask

    first = candidate()
    # The analyst's labels: under half of the candidate (so Accept must go around them) and
    # under half of the result objects (so Merge must), plus one elsewhere.
    mine = np.zeros((768, 1536), np.int32)
    ys, xs = np.nonzero(first)
    mine[ys[: len(ys) // 2], xs[: len(xs) // 2]] = 3
    ys, xs = np.nonzero(layer.data > 0)
    mine[ys[: len(ys) // 2], xs[: len(xs) // 2]] = 5
    mine[700:720, 10:30] = 9
    own = viewer.add_labels(mine.copy(), name="my labels", **placement(image))
    inter.target.value = own

    ui.click(inter.accept_button)
    assert inter.last_error is None, inter.status.value
    expected = mine.copy()
    expected[first & (mine == 0)] = 10
    assert np.any(first & (mine > 0)) and np.any(expected == 10)
    np.testing.assert_array_equal(own.data, expected)
    row = own.features.iloc[-1]
    assert (row["index"], row["prompt_kind"]) == (10, "interactive")
    assert row["area"] == np.count_nonzero(expected == 10)
    assert own.metadata["crs"] == "EPSG:32633"
    own.undo()  # napari's undo: one step takes the accept back
    np.testing.assert_array_equal(own.data, mine)

    second = candidate()
    ui.click(inter.accept_button)
    assert inter.last_error is None, inter.status.value
    new = (own.data == 10) & (mine == 0)
    assert new.any() and np.array_equal(new, second & (mine == 0))
    ys, xs = np.nonzero(new)
    brushed = (ys[: len(ys) // 3], xs[: len(xs) // 3])
    own.data_setitem(brushed, 9)  # the analyst paints over part of it afterwards
    ui.click(inter.undo_accept_button)
    assert inter.last_error is None, inter.status.value
    expected = mine.copy()
    expected[brushed] = 9  # kept: Undo accept takes back only what is still the accepted label
    np.testing.assert_array_equal(own.data, expected)
    assert 10 not in own.features["index"].tolist()

    theirs = viewer.add_labels(mine.copy(), name="their labels", **placement(image))
    table.target.value = theirs
    ui.click(table.merge_button)
    assert table.last_error is None, table.status.value
    np.testing.assert_array_equal(theirs.data[mine > 0], mine[mine > 0])
    assert ui.label_ids(theirs) - {3, 5, 9}, "merged objects added"
    theirs.undo()  # the same one step takes the whole merge back
    np.testing.assert_array_equal(theirs.data, mine)
    assert painted_into == ["my labels", "my labels", "their labels"], "one painter for both"

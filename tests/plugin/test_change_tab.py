"""The Change tab: two dates open as layers, one query, the library's change table as one
coloured labels layer per class on the first date's pixels; the results table shows one class.

The tiny random-weight model's masks are meaningless, so the test compares the tab with
`change_between` on the same files, and uses what holds whatever the masks are: the same pixels
on a moved grid give no new and no gone object; a block painted as nodata gives unknown there.
"""

from __future__ import annotations

import numpy as np
import pytest
from rasterio.transform import Affine

from .._rasters import later_date, write_geotiff

pytestmark = pytest.mark.napari


@pytest.fixture
def dates(tmp_path, s2_crop):
    before = write_geotiff(tmp_path / "d1.tif", s2_crop.data, s2_crop.transform, s2_crop.crs)
    after, _ = later_date(tmp_path, s2_crop, "d2.tif")
    return before, after


def test_change_tab_shows_the_library_table_one_layer_per_class(
    make_napari_viewer, dates, connected, ui
):
    from napari_sam3.change import change_between
    from napari_sam3.change.style import CHANGE_COLOURS
    from napari_sam3.plugin.widgets import ResultsTable, Sam3Panel
    from napari_sam3.plugin.widgets._layers import _record
    from napari_sam3.prompts.query import Query
    from napari_sam3.scene import SceneSettings

    viewer = make_napari_viewer()
    first = viewer.open(str(dates[0]), plugin="napari-sam3")
    second = viewer.open(str(dates[1]), plugin="napari-sam3")
    panel = Sam3Panel(viewer)
    viewer.window.add_dock_widget(panel, name="SAM3")
    table = ResultsTable(viewer)
    tab = panel.mode("Change")
    tab.before.value, tab.after.value = first[0], second[0]
    tab.prompt.value = "building, field"
    panel.score_thr.value = 0.0
    panel.max_det.value = 5
    count = len(viewer.layers)
    ui.run(tab, panel.run_button("Change"))
    assert tab.last_error is None, tab.last_error

    want, _ = change_between(
        connected,
        [str(dates[0]), str(dates[1])],
        Query(keywords=("building", "field"), score_thr=0.0, max_det=5),
        SceneSettings(),
    )
    added = viewer.layers[count:]
    by_class = {_record(layer)["change"]: layer for layer in added}
    assert set(by_class) == set(want["change"])
    assert set(by_class) <= {"same", "unknown"}  # the same pixels: nothing new, nothing gone
    assert "unknown" in by_class  # the painted block
    for change, layer in by_class.items():
        rows = want[want["change"] == change]
        assert len(layer.features) == len(rows)
        assert sorted(layer.features["keyword"]) == sorted(rows["keyword"])
        assert layer.visible == (change != "same")
        if change != "unknown":
            colour = layer.colormap.map(np.array([1]))[0][:3]
            assert np.allclose(colour * 255, _rgb(CHANGE_COLOURS[change]), atol=1)
    # on the first date's pixels: each object's pixels lie inside its polygon in map units
    layer = next(iter(by_class.values()))
    transform = Affine(*layer.metadata["transform"][:6])
    rows, cols = np.nonzero(layer.data == 1)
    x, y = transform * (cols + 0.5, rows + 0.5)
    first_row = want[want["change"] == _record(layer)["change"]]
    assert len(rows) and _inside(first_row, layer.features, x, y)
    world = layer.data_to_world((rows[0], cols[0]))
    assert np.allclose(world, first[0].data_to_world(first[0].world_to_data(world)))

    table.refresh()
    shown = table._show_choices()
    assert set(shown[1:]) == {layer.name for layer in added}
    table.only.value = by_class["unknown"].name
    assert set(table.rows["layer"]) == {by_class["unknown"].name}
    assert len(table.rows) == len(by_class["unknown"].features)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def _inside(rows, features, x, y) -> bool:
    """Label 1's pixel centres fall within the polygon of the row it stands for (or within a
    pixel of it: rasterizing takes centres)."""
    import shapely

    keyword = features["keyword"].iloc[0]
    score = features["score"].iloc[0]
    candidates = rows[(rows["keyword"] == keyword)]
    shapes = shapely.union_all(candidates.geometry.buffer(15).to_numpy())
    return bool(shapely.contains_xy(shapes, x, y).all()) and np.isfinite(score)

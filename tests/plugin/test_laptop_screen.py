"""napari on a laptop screen: the SAM3 panel fits, and the image looks like what the model sees.

Driven as an analyst would on a 1366 x 768 screen (pytest-xvfb's, set in pyproject), with the
plugin's reader on the real Sentinel-2 bands, the tiny model connected, the SAM3 panel and the
results table docked and the window sized to the screen; 1920 x 1080 in a process of its own
(tests/plugin/screen_probe.py). On the code before: the panel's minimum height was ~1500 px (the
window grew past the screen), the connection form stayed open, thresholds were always shown, the
band layers' contrast did not follow a stretch control (there was none), the picker listed band
layers ("... B04") with an empty Bands field, and the keys were viewer bindings napari's
preferences did not list.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.napari

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("screen_probe.py")
STACK = "T33UUU_20170216T102101"
SCENE = f"{STACK}: 3 bands (B04, B03, B02)"


def _probe():
    spec = importlib.util.spec_from_file_location("screen_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def laptop(make_napari_viewer, s2_rgb_files, sam3_client, qtbot):
    """(viewer, panel, results table): the scene opened, connected, both docks in, the window
    on the screen."""
    viewer = make_napari_viewer(show=True)
    panel, table = _probe().dock(viewer, s2_rgb_files, sam3_client, qtbot.wait)
    return viewer, panel, table


def _check_fits(shot: dict, size: tuple[int, int]) -> None:
    assert tuple(shot["screen"]) == size, "the virtual screen is not the size under test"
    width, height = shot["screen"]
    assert shot["window"][1] <= height and shot["window"][0] <= width, shot["window"]
    assert shot["window_minimum"][1] <= height, "the docks would make the window grow"
    assert shot["canvas"][0] >= 400 and shot["canvas"][1] >= 400, "the canvas is squeezed"
    assert not shot["connection_form_shown"] and shot["change_button_shown"]
    assert shot["summary"].startswith("Connected: ")
    assert not shot["advanced_expanded"] and not shot["thresholds_shown"]
    for title, tab in shot["tabs"].items():
        reached = tab["shown"] and tab["in_view"] and tab["on_screen"]
        assert reached, f"{title}: {tab['button']} cannot be reached"
        # Each tab as tall as its own page (not the tallest), give or take the tab bar.
        assert tab["tab_height"] <= tab["page_height"] + 60, (title, tab)


def test_panel_fits_a_1366x768_screen(laptop, qtbot):
    viewer, panel, _table = laptop
    shot = _probe().measure(viewer, panel, qtbot.wait)
    _check_fits(shot, (1366, 768))
    text = shot["tabs"]["Text & exemplars"]["tab_height"]
    assert text < shot["tabs"]["Interactive"]["tab_height"] - 150


def test_panel_fits_a_1920x1080_screen(sam3_repository, tmp_path):
    done = subprocess.run(
        [sys.executable, str(PROBE), "--size", "1920x1080", "--repository", str(sam3_repository)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _check_fits(json.loads(done.stdout), (1920, 1080))


def test_connection_folds_to_one_line_and_advanced_opens(laptop, ui, qtbot):
    from napari_sam3.plugin.widgets._common import STATE
    from napari_sam3.plugin.widgets.panel import CHANGE, HIDE

    viewer, panel, _table = laptop
    line = panel.summary
    assert line.sizeHint().height() < 2 * line.fontMetrics().height(), "one line"
    assert "RANDOM WEIGHTS" in line.text() and "RANDOM WEIGHTS" in line.toolTip()
    assert panel.change_button.text == CHANGE
    ui.click(panel.change_button)
    assert not panel.connection.native.isHidden() and panel.change_button.text == HIDE
    assert panel.connection.disconnect_button.native.isVisible()
    ui.click(panel.change_button)
    assert panel.connection.native.isHidden()

    STATE.set_client(None)  # not connected: the form opens by itself
    assert not panel.connection.native.isHidden() and "Not connected" in line.text()

    assert panel.advanced.content().height() == 0 and not panel.advanced.isExpanded()
    ui.click(_toggle(panel.advanced))
    qtbot.waitUntil(lambda: panel.advanced.content().height() > 0)
    panel.scroll.ensureWidgetVisible(panel.dedup.native)
    qtbot.waitUntil(lambda: not panel.dedup.native.visibleRegion().isEmpty())
    assert panel.advanced.isExpanded()


def _toggle(collapsible):
    class Button:  # ui.click takes a magicgui-like object with .native
        native = collapsible._toggle_btn

    return Button


def test_display_contrast_is_the_models_stretch(laptop, s2_rgb_paths):
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.imagery.stretch import compute_stretch, to_model_rgb
    from napari_sam3.plugin.widgets._fields import target_of

    viewer, panel, _table = laptop
    raster = read_raster(s2_rgb_paths)
    bands = [viewer.layers[f"{STACK} {b}"] for b in ("B04", "B03", "B02")]

    def check(percentiles):
        expected = compute_stretch(raster, percentiles=percentiles)
        shown = [tuple(layer.contrast_limits) for layer in bands]
        np.testing.assert_allclose(shown, list(zip(expected.low, expected.high, strict=True)))
        target = target_of(panel)  # what a run sends
        np.testing.assert_allclose(target.stats.low, expected.low)
        np.testing.assert_allclose(target.stats.high, expected.high)
        model = to_model_rgb(target.image, stats=target.stats)
        np.testing.assert_array_equal(model, to_model_rgb(raster, percentiles=percentiles))

    assert [layer.colormap.name for layer in bands] == ["red", "green", "blue"]
    assert {layer.blending for layer in bands} == {"additive"}
    assert (panel.stretch_low.value, panel.stretch_high.value) == (2.0, 98.0)
    check((2, 98))
    panel.stretch_low.value, panel.stretch_high.value = 5.0, 95.0  # the panel's control
    check((5, 95))
    assert "stretched at 5-95 %" in panel.status.value


def test_picker_names_scenes_and_follows_the_layer_list(laptop, s2_rgb_paths, tmp_path):
    import rasterio

    viewer, panel, _table = laptop
    assert panel.image.native.itemText(0) == SCENE
    assert panel.image.value is viewer.layers[f"{STACK} B04"]
    assert panel.bands.value == "B04 B03 B02"
    panel.image.value = viewer.layers[f"{STACK} B02"]  # any band layer: its scene
    assert panel.image.value is viewer.layers[f"{STACK} B04"]

    # A 3-band GeoTIFF whose bands have no names: the reader's band_1 .. band_3.
    raster = rasterio.open(s2_rgb_paths[0])
    data = np.stack([rasterio.open(p).read(1) for p in s2_rgb_paths])
    path = tmp_path / "landsat8_rgb.tif"
    profile = {"driver": "GTiff", "count": 3, "dtype": data.dtype, "crs": raster.crs}
    profile.update(width=data.shape[2], height=data.shape[1], transform=raster.transform)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    viewer.open(str(path), plugin="napari-sam3")
    names = [panel.image.native.itemText(i) for i in range(panel.image.native.count())]
    assert names == [SCENE, "landsat8_rgb: 3 bands (1, 2, 3)"]

    viewer.layers.selection.active = viewer.layers["landsat8_rgb band_2"]  # the layer list
    assert panel.image.value is viewer.layers["landsat8_rgb band_1"]
    assert panel.bands.value == "1 2 3"
    viewer.layers.selection.active = viewer.layers[f"{STACK} B03"]
    assert panel.image.value is viewer.layers[f"{STACK} B04"]
    assert panel.bands.value == "B04 B03 B02"


def test_interactive_keys_are_napari_actions_pressed_on_the_canvas(laptop, sam3_client, ui, qtbot):
    from napari._qt.widgets.qt_keyboard_settings import ShortcutEditor
    from qtpy.QtCore import Qt

    from napari_sam3.plugin.widgets.interactive import SHORTCUTS, shortcut_keys

    viewer, panel, _table = laptop
    widget = panel.mode("Interactive")
    listed = ShortcutEditor().key_bindings_strs[ShortcutEditor.VIEWER_KEYBINDINGS]
    for name, (key, text, _method) in SHORTCUTS.items():
        assert name in listed and listed[name].description == text  # napari's preferences
        keys = shortcut_keys(name)
        assert keys == [key], name  # the default (the test's napari settings are fresh)
        assert f"{keys[0]}: {text.removeprefix('SAM3: ')}" in widget.shortcuts.tooltip
        assert f"{keys[0]}: {text.removeprefix('SAM3: ')}" in panel.tabs.tabToolTip(2)

    canvas = viewer.window._qt_viewer.canvas.native
    shift = Qt.KeyboardModifier.ShiftModifier

    def press(key):
        qtbot.keyClick(canvas, key, shift)
        ui.wait(widget)

    press(Qt.Key.Key_N)  # negative clicks: the prompt layers made, the clicks layer in add mode
    clicks = viewer.layers["SAM3 clicks"]
    assert widget.negative.value is True and viewer.layers.selection.active is clicks
    assert clicks.mode == "add" and clicks.feature_defaults["positive"][0] == False  # noqa: E712
    press(Qt.Key.Key_G)
    assert widget.negative.value is False and clicks.feature_defaults["positive"][0] == True  # noqa: E712

    clicks.add(np.array([[300.0, 500.0]]))
    ui.wait(widget)
    assert widget.last_error is None, widget.status.value
    # The best candidate for that click, as the library gives it on the same image.
    best = sam3_client.interactive(widget.session.prepared).add_point((500.5, 300.5))
    assert widget.candidate.value == 0
    np.testing.assert_array_equal(widget.candidate_mask(), np.asarray(best["mask"].iloc[0]))
    clicks.add(np.array([[320.0, 520.0]]))
    ui.wait(widget)
    press(Qt.Key.Key_Z)  # undo the last prompt
    assert len(clicks.data) == 1 and "undone" in widget.status.value
    press(Qt.Key.Key_C)  # accept
    assert widget.last_error is None, widget.status.value
    objects = viewer.layers["SAM3 objects"]
    assert ui.label_ids(objects) == {1} and len(clicks.data) == 0
    clicks.add(np.array([[100.0, 100.0]]))
    ui.wait(widget)
    press(Qt.Key.Key_R)  # reset
    assert len(clicks.data) == 0 and widget.candidate_mask() is None
    press(Qt.Key.Key_U)  # undo the accept
    assert ui.label_ids(objects) == set()


# Where the plugin's own text names a place in napari: "Plugins > A > B" and the like.
MENU = re.compile(
    r"\b((?:File|View|Layers|Plugins|Window|Help) > [^*\"'`()\n]+?)(?=[*\"'`)\n]|, |\. |$)"
)
# ... or one of its widgets: (press X), (tick 'X'), under 'X', "the X tab", "(X tab)".
WIDGET = re.compile(
    r"(?:press|tick|under) '?([A-Z][\w &]*?)'?(?=[)\s:,.]|$)|(?:the |\()([A-Z][\w &]*?) tab\b"
)


OTHER_APPS = {"qgis.md"}  # its menus are QGIS's, not napari's


def _texts():
    """Every file whose text an analyst reads: the plugin's code, the README, the docs and the
    notebooks."""
    files = [*sorted((ROOT / "src" / "napari_sam3").rglob("*.py")), ROOT / "README.md"]
    docs = [d for d in sorted((ROOT / "docs").glob("*.md")) if d.name not in OTHER_APPS]
    files += docs + sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        yield path, re.sub(r"\s*\n\s*", " ", text.replace('"\n', "\n"))


def _menu_paths(window) -> list[tuple[str, ...]]:
    """Every item of napari's menu bar as a path, with the Preferences dialog's sections."""
    from napari._qt.dialogs.preferences_dialog import PreferencesDialog

    paths = []

    def walk(menu, path):
        for action in menu.actions():
            title = action.text().replace("&", "")
            if action.menu() is not None:
                walk(action.menu(), (*path, title))
            elif title:
                paths.append((*path, title))

    for action in window.menuBar().actions():
        walk(action.menu(), (action.text().replace("&", ""),))
    dialog = PreferencesDialog()
    sections = [dialog._list.item(i).text() for i in range(dialog._list.count())]
    paths += [("File", "Preferences", section) for section in sections]
    return paths


def test_every_menu_and_widget_named_in_the_text_exists(laptop):
    from napari_sam3.plugin.widgets.panel import TABS

    viewer, panel, table = laptop
    menus = _menu_paths(viewer.window._qt_window)
    names = set(TABS)
    for widget in [panel, *panel.modes, panel.connection, table]:
        for child in _all_widgets(widget):
            names.update(filter(None, [getattr(child, "label", ""), getattr(child, "text", "")]))
    names = {str(n) for n in names}

    found = 0
    for path, text in _texts():
        for match in MENU.finditer(text):
            wanted = tuple(part.strip() for part in match.group(1).split(" > "))
            ok = any(
                len(real) >= len(wanted)
                and real[: len(wanted) - 1] == wanted[:-1]
                and real[len(wanted) - 1].startswith(wanted[-1].rstrip("…"))
                for real in menus
            )
            assert ok, f"{path.name}: '{match.group(1)}' is not in napari's menus"
            found += 1
        if path.parent.name not in ("widgets", "plugin"):
            continue
        for match in WIDGET.finditer(text):
            if text[match.end() :].startswith(" >"):  # a menu, checked above
                continue
            wanted = (match.group(1) or match.group(2)).strip()
            assert any(n.startswith(wanted) for n in names), f"{path.name}: no widget '{wanted}'"
            found += 1
    assert found >= 10, "the patterns found (almost) nothing: check them"


def _all_widgets(container):
    for child in container:
        yield child
        if hasattr(child, "__iter__") and not isinstance(child, str):
            try:
                yield from _all_widgets(child)
            except TypeError:
                pass

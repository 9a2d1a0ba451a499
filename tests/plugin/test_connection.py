"""The Connection widget: embedded engine, errors, and the choice remembered across sessions."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.napari


def test_connect_embedded_and_remember(make_napari_viewer, sam3_repository, ui):
    from napari_sam3.plugin.settings import load_connection
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE
    from napari_sam3.plugin.widgets.connection import EMBEDDED

    viewer = make_napari_viewer()
    _dock, panel = viewer.window.add_plugin_dock_widget("napari-sam3", "SAM3")
    widget = ConnectionWidget(viewer)
    viewer.window.add_dock_widget(widget)
    assert widget.engine.value == EMBEDDED
    widget.repository.value = str(sam3_repository)
    ui.run(widget, widget.connect_button)

    assert STATE.client is not None
    assert "RANDOM WEIGHTS" in widget.model.value and "RANDOM WEIGHTS" in panel.model.value
    assert "exemplar slots: 8" in widget.info.value
    saved = load_connection()
    assert (saved.engine, saved.repository) == ("embedded", str(sam3_repository))

    # A new napari session: the widget comes back with the same choice.
    viewer2 = make_napari_viewer()
    again = ConnectionWidget(viewer2)
    assert str(again.repository.value) == str(sam3_repository)
    assert again.engine.value == EMBEDDED


def test_connect_on_start(make_napari_viewer, sam3_repository, ui):
    from napari_sam3.plugin.settings import ConnectionSettings, save_connection
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE

    save_connection(ConnectionSettings(repository=str(sam3_repository), connect_on_start=True))
    widget = ConnectionWidget(make_napari_viewer())
    ui.wait(widget)
    assert STATE.client is not None and widget.last_error is None


def test_bad_repository_and_server_are_reported(make_napari_viewer, tmp_path, ui):
    from napari_sam3.plugin.settings import settings_path
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE
    from napari_sam3.plugin.widgets.connection import TRITON

    widget = ConnectionWidget(make_napari_viewer())
    widget.repository.value = str(tmp_path / "missing")
    ui.click(widget.connect_button)
    ui.wait(widget)
    assert "no model repository folder" in widget.status.value
    assert "no model repository folder" in str(ui.last_notification().message)
    assert STATE.client is None
    assert not settings_path().exists(), "a failed connection is not remembered"

    widget.engine.value = TRITON
    assert widget.repository_row.native.isHidden() and not widget.address.native.isHidden()
    widget.address.value = ""
    ui.click(widget.connect_button)
    ui.wait(widget)
    assert "gRPC address" in widget.status.value


def test_settings_survive_a_broken_file():
    from napari_sam3.plugin.settings import (
        ConnectionSettings,
        load_connection,
        save_connection,
        settings_path,
    )

    assert load_connection() == ConnectionSettings()
    settings_path().parent.mkdir(parents=True)
    settings_path().write_text("{not json")
    assert load_connection() == ConnectionSettings()
    save_connection(ConnectionSettings(engine="triton", address="gpu-box:8001"))
    assert load_connection().address == "gpu-box:8001"
    settings_path().write_text('{"connection": {"engine": "quantum"}}')
    assert load_connection() == ConnectionSettings()


def test_disconnect_closes_the_client_it_made(make_napari_viewer, sam3_repository, sam3_client, ui):
    import numpy as np

    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE

    widget = ConnectionWidget(make_napari_viewer())
    widget.repository.value = str(sam3_repository)
    ui.run(widget, widget.connect_button)
    made = STATE.client
    assert made is not None and made.segment(np.zeros((30, 40, 3), np.uint8), "x") is not None
    ui.click(widget.disconnect_button)
    assert STATE.client is None and widget.status.value == "Disconnected"
    with pytest.raises(RuntimeError, match="closed"):
        made.segment(np.zeros((30, 40, 3), np.uint8), "x")
    # A client handed to the widgets from a notebook stays open: it is the notebook's.
    STATE.set_client(sam3_client)
    ui.click(widget.disconnect_button)
    assert STATE.client is None
    assert sam3_client.segment(np.zeros((30, 40, 3), np.uint8), "x") is not None

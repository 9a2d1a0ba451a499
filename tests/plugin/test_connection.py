"""The Connection widget: embedded engine, errors, and the choice remembered across sessions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.napari

BLANK = np.zeros((30, 40, 3), np.uint8)


def assert_runs_repository(client, repository) -> None:
    """`client` runs THIS repository's model in process (the embedded engine)."""
    from napari_sam3.core import contract
    from napari_sam3.runtime.engines.local import LocalEngine

    assert isinstance(client.engine, LocalEngine)
    assert Path(client.engine.repository).resolve() == Path(repository).resolve()
    assert client.model_id == contract.load_manifest(repository).model_id


def assert_answers_blank(frame) -> None:
    """`segment(BLANK, "x", score_thr=0.0)`'s answer: result rows inside the 30 x 40 image."""
    assert list(frame.columns) == ["box", "score", "mask", "keyword", "prompt_kind"]
    assert len(frame) > 0  # score_thr 0: every candidate is kept
    assert frame["score"].dtype == np.float32 and frame["score"].between(0, 1).all()
    assert set(frame["keyword"]) == {"x"} and set(frame["prompt_kind"]) == {"text"}
    for (x1, y1, x2, y2), mask in zip(frame["box"], frame["mask"], strict=True):
        assert 0 <= x1 <= x2 <= 40 and 0 <= y1 <= y2 <= 30
        assert np.asarray(mask).shape == (30, 40) and np.asarray(mask).dtype == bool


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
    widget.precision.value = "fp32"  # the suite's precision, chosen as an analyst would
    ui.run(widget, widget.connect_button)

    assert_runs_repository(STATE.client, sam3_repository)
    assert "RANDOM WEIGHTS" in widget.model.value and "RANDOM WEIGHTS" in panel.model.value
    assert "exemplar slots: 8" in widget.info.value
    saved = load_connection()
    assert (saved.engine, saved.repository, saved.precision) == (
        "embedded",
        str(sam3_repository),
        "fp32",
    )

    # A new napari session: the widget comes back with the same choice.
    viewer2 = make_napari_viewer()
    again = ConnectionWidget(viewer2)
    assert str(again.repository.value) == str(sam3_repository)
    assert again.engine.value == EMBEDDED


def test_connect_on_start(make_napari_viewer, sam3_repository, ui):
    from napari_sam3.plugin.settings import ConnectionSettings, save_connection
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE

    save_connection(
        ConnectionSettings(repository=str(sam3_repository), precision="fp32", connect_on_start=True)
    )
    widget = ConnectionWidget(make_napari_viewer())
    ui.wait(widget)
    assert widget.last_error is None, widget.status.value
    assert_runs_repository(STATE.client, sam3_repository)


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
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE

    widget = ConnectionWidget(make_napari_viewer())
    widget.repository.value = str(sam3_repository)
    widget.precision.value = "fp32"
    ui.run(widget, widget.connect_button)
    made = STATE.client
    assert_runs_repository(made, sam3_repository)
    assert_answers_blank(made.segment(BLANK, "x", score_thr=0.0))
    ui.click(widget.disconnect_button)
    assert STATE.client is None and widget.status.value == "Disconnected"
    with pytest.raises(RuntimeError, match="closed"):
        made.segment(BLANK, "x")
    # A client handed to the widgets from a notebook stays open: it is the notebook's.
    before = sam3_client.segment(BLANK, "x", score_thr=0.0)
    STATE.set_client(sam3_client)
    ui.click(widget.disconnect_button)
    assert STATE.client is None
    after = sam3_client.segment(BLANK, "x", score_thr=0.0)
    assert_answers_blank(after)
    pd.testing.assert_frame_equal(after.drop(columns="mask"), before.drop(columns="mask"))

"""The Connection widget's runtime and precision: passed to the embedded engine, shown, remembered."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.napari


def test_runtime_choice_is_used_shown_and_remembered(make_napari_viewer, sam3_repository, ui):
    from napari_sam3.plugin.settings import load_connection
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE

    widget = ConnectionWidget(make_napari_viewer())
    assert (widget.runtime.value, widget.precision.value) == ("auto", "auto")
    widget.repository.value = str(sam3_repository)
    widget.runtime.value, widget.precision.value = "onnxruntime", "fp32"
    ui.run(widget, widget.connect_button)

    assert STATE.client is not None and widget.last_error is None
    line = STATE.client.engine.runtime_summary()
    assert line.startswith("onnxruntime fp32: encoder, text")
    assert f"runtime: {line}. Why: " in widget.info.value  # with the reason
    assert f"runtime={line}" in repr(STATE.client)
    saved = load_connection()
    assert (saved.runtime, saved.precision) == ("onnxruntime", "fp32")
    again = ConnectionWidget(make_napari_viewer())
    assert (again.runtime.value, again.precision.value) == ("onnxruntime", "fp32")


def test_bf16_on_a_cpu_without_it_is_reported_not_downgraded(
    make_napari_viewer, sam3_repository, ui, avx2_host
):
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets._common import STATE

    widget = ConnectionWidget(make_napari_viewer())
    widget.repository.value = str(sam3_repository)
    widget.runtime.value, widget.precision.value = "openvino", "bf16"
    ui.click(widget.connect_button)
    ui.wait(widget)
    assert STATE.client is None
    assert "bf16" in widget.status.value and "silently compute fp32" in widget.status.value

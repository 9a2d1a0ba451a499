"""The Connection widget's runtime and precision: passed to the embedded engine, shown, remembered."""

from __future__ import annotations

import pytest

from napari_sam3.triton_models.onnx_runner import native_bf16

pytestmark = pytest.mark.napari


def test_runtime_choice_is_used_shown_and_remembered(make_napari_viewer, sam3_repository, ui):
    from napari_sam3.settings import load_connection
    from napari_sam3.widgets import ConnectionWidget
    from napari_sam3.widgets._common import STATE

    widget = ConnectionWidget(make_napari_viewer())
    assert (widget.runtime.value, widget.precision.value) == ("auto", "auto")
    widget.repository.value = str(sam3_repository)
    widget.runtime.value, widget.precision.value = "onnxruntime", "fp32"
    ui.run(widget, widget.connect_button)

    assert STATE.client is not None and widget.last_error is None
    assert STATE.client.engine.runtime_summary() == "onnxruntime/fp32"
    assert "runtime: onnxruntime/fp32 (" in widget.info.value  # with the reason
    assert "runtime=onnxruntime/fp32" in repr(STATE.client)
    saved = load_connection()
    assert (saved.runtime, saved.precision) == ("onnxruntime", "fp32")
    again = ConnectionWidget(make_napari_viewer())
    assert (again.runtime.value, again.precision.value) == ("onnxruntime", "fp32")


@pytest.mark.skipif(native_bf16()[0], reason="this CPU computes bf16 natively")
def test_bf16_on_a_cpu_without_it_is_reported_not_downgraded(
    make_napari_viewer, sam3_repository, ui
):
    from napari_sam3.widgets import ConnectionWidget
    from napari_sam3.widgets._common import STATE

    widget = ConnectionWidget(make_napari_viewer())
    widget.repository.value = str(sam3_repository)
    widget.runtime.value, widget.precision.value = "openvino", "bf16"
    ui.click(widget.connect_button)
    ui.wait(widget)
    assert STATE.client is None
    assert "bf16" in widget.status.value and "silently compute fp32" in widget.status.value

"""The panel's connection section holds a whole ConnectionSpec, and says where it is.

On the code before: the widget had no deadline, no client certificate or key, no threads or cache
bound (a spec with them could not round-trip through the panel), and "Not connected" sent users to
"Plugins > ... > Connection", a widget that no longer exists (the connection is the top of the one
SAM3 panel).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.napari

EMBEDDED = dict(repository="models/sam3", runtime="onnxruntime", precision="fp32", threads=3,
                cache_bytes=123_456_789)  # fmt: skip
TRITON = dict(servers=("10.0.0.1:8001", "10.0.0.2:8001"), tls=True,
              root_certificates="certs/ca.pem", certificate_chain="certs/client.pem",
              private_key="certs/client.key", connect_timeout=12.5, request_timeout=90.0,
              deadline=135.5)  # fmt: skip


@pytest.mark.parametrize("fields", [EMBEDDED, TRITON], ids=["embedded", "triton"])
def test_a_spec_round_trips_through_the_panel(fields, make_napari_viewer):
    from napari_sam3.client.connection import ConnectionSpec
    from napari_sam3.plugin.settings import ConnectionSettings, load_connection, save_connection
    from napari_sam3.plugin.widgets import Sam3Panel
    from napari_sam3.plugin.widgets.connection import EMBEDDED as EMBEDDED_CHOICE
    from napari_sam3.plugin.widgets.connection import TRITON as TRITON_CHOICE

    spec = ConnectionSpec(**fields)
    other = ConnectionSpec(**(TRITON if spec.embedded else EMBEDDED))
    # both engines' fields remembered, this spec's engine chosen
    save_connection(ConnectionSettings.from_spec(spec, base=ConnectionSettings.from_spec(other)))
    panel = Sam3Panel(make_napari_viewer())
    widget = panel.connection
    assert widget.settings() == load_connection()
    assert widget.settings().spec() == spec
    # the deadline, client certificate and key show for Triton with TLS; threads, cache embedded
    shown = [widget.timeouts_row, widget.tls_client_cert, widget.tls_client_key]
    assert all(w.native.isHidden() for w in shown) == spec.embedded
    assert widget.embedded_row.native.isHidden() != spec.embedded
    # switching the engine gives the other spec, as remembered
    widget.engine.value = TRITON_CHOICE if spec.embedded else EMBEDDED_CHOICE
    assert widget.settings().spec() == other


def test_panel_fields_make_the_spec(make_napari_viewer, tmp_path):
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets.connection import TRITON as TRITON_CHOICE

    widget = ConnectionWidget(make_napari_viewer())
    widget.engine.value = TRITON_CHOICE
    widget.address.value = "127.0.0.1:8001"
    widget.tls.value = True
    widget.tls_root_cert.value = str(tmp_path / "ca.pem")
    widget.tls_client_cert.value = str(tmp_path / "client.pem")
    widget.tls_client_key.value = str(tmp_path / "client.key")
    widget.deadline.value = 75
    spec = widget.settings().spec()
    assert spec.deadline == 75.0 and spec.total_deadline == 75.0
    assert (spec.certificate_chain, spec.private_key) == (
        str(tmp_path / "client.pem"),
        str(tmp_path / "client.key"),
    )
    widget.deadline.value = 0  # 0: the default, 1.5 x the request timeout
    assert widget.settings().spec().deadline is None
    widget.tls_client_key.value = ""
    with pytest.raises(ValueError, match="together"):
        widget.settings().spec()


def test_not_connected_names_the_panel_that_exists(make_napari_viewer):
    import napari_sam3
    from napari_sam3.plugin.widgets import Sam3Panel
    from napari_sam3.plugin.widgets._common import NOT_CONNECTED

    manifest = yaml.safe_load((Path(napari_sam3.__file__).parent / "napari.yaml").read_text())
    commands = {c["id"]: c["python_name"] for c in manifest["contributions"]["commands"]}
    (panel,) = [
        w["display_name"]
        for w in manifest["contributions"]["widgets"]
        if commands[w["command"]].endswith(":Sam3Panel")
    ]
    assert f"Plugins > {manifest['display_name']} > {panel}" in NOT_CONNECTED
    assert "> Connection" not in NOT_CONNECTED
    viewer = make_napari_viewer()
    _dock, docked = viewer.window.add_plugin_dock_widget("napari-sam3", panel)
    assert isinstance(docked, Sam3Panel) and "Not connected" in docked.model.value

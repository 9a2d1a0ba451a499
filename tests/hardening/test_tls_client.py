"""The client over TLS against a real `sam3-serve --tls-cert/--tls-key`, certificates made here.

On the code before: the client had no TLS option (gRPC was plaintext only).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.plugin.settings import ConnectionSettings
from napari_sam3.plugin.widgets.connection import connect
from napari_sam3.serving.ports import free_port

needs_server = pytest.mark.needs_tritonserver

pytestmark = needs_server


def test_segment_over_mutual_tls_equals_the_embedded_engine(tls_server, certs, local_client):
    image = np.random.default_rng(3).integers(0, 256, (80, 96, 3), np.uint8)
    with Sam3Client(
        tls_server,
        tls=True,
        root_certificates=certs / "ca.pem",
        private_key=certs / "client.key",
        certificate_chain=certs / "client.pem",
        connect_timeout=30,
    ) as client:
        served = client.segment(image, "building", score_thr=0.0, dedup=None)
    here = local_client.segment(image, "building", score_thr=0.0, dedup=None)
    assert len(served) == len(here) > 0
    np.testing.assert_allclose(served["score"].values, here["score"].values, atol=1e-4)
    np.testing.assert_allclose(np.stack(served["box"]), np.stack(here["box"]), atol=1e-2)
    for a, b in zip(served["mask"], here["mask"], strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert served["keyword"].tolist() == here["keyword"].tolist()


def test_wrong_trust_or_plaintext_gets_a_clear_error(tls_server, certs, tmp_path):
    cases = [
        ({}, "is the server serving TLS"),
        ({"tls": True, "root_certificates": certs / "other_ca.pem"}, "this client uses TLS"),
        # mutual TLS: no client certificate
        ({"tls": True, "root_certificates": certs / "ca.pem"}, "this client uses TLS"),
    ]
    for options, message in cases:
        with pytest.raises(ConnectionError, match=message):
            Sam3Client(tls_server, connect_timeout=3, **options)
    with pytest.raises(ValueError, match="pass tls=True"):
        Sam3Client(tls_server, root_certificates=certs / "ca.pem")
    with pytest.raises(FileNotFoundError, match="root_certificates: no file"):
        Sam3Client(tls_server, tls=True, root_certificates=certs / "missing.pem")
    (tmp_path / "ca.txt").write_text("subjectAltName=DNS:localhost\n")
    with pytest.raises(ValueError, match="not a PEM file"):
        Sam3Client(tls_server, tls=True, root_certificates=tmp_path / "ca.txt")
    with pytest.raises(ValueError, match="together"):
        Sam3Client(tls_server, tls=True, private_key=certs / "client.key")


def test_cli_and_widget_connect_over_tls(tls_server, certs, tiny_repository):
    result = subprocess.run(
        [sys.executable, "-m", "napari_sam3.cli", "info", "--server", tls_server, "--tls",
         "--tls-root-cert", str(certs / "ca.pem"), "--tls-client-cert", str(certs / "client.pem"),
         "--tls-client-key", str(certs / "client.key"), "--connect-timeout", "30"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Sam3Client('127.0.0.1:" in result.stdout
    # The Connection widget's settings: CA only, which this mutual-TLS server refuses ...
    settings = ConnectionSettings(
        engine="triton", address=tls_server, tls=True, tls_root_cert=str(certs / "ca.pem"),
        connect_timeout=3,
    )  # fmt: skip
    with pytest.raises(ConnectionError, match="within 3 s"):
        connect(settings)
    # ... and without TLS the widget's client speaks plaintext, refused the same way.
    with pytest.raises(ConnectionError, match="serving TLS"):
        connect(ConnectionSettings(engine="triton", address=tls_server, connect_timeout=3))


def test_server_tls_without_client_certificates(tiny_repository, certs, sam3_serve, local_client):
    grpc = free_port()
    serve = sam3_serve(tiny_repository, "--grpc-port", grpc, "--http-port", free_port(),
                       "--tls-cert", certs / "server.pem", "--tls-key", certs / "server.key")  # fmt: skip
    serve.wait_for("ready on grpc\\+tls", timeout=300)
    settings = ConnectionSettings(
        engine="triton", address=f"localhost:{grpc}", tls=True,
        tls_root_cert=str(certs / "ca.pem"), connect_timeout=30,
    )  # fmt: skip
    client = connect(settings)
    try:
        assert client.engine.target == f"dns:///localhost:{grpc}"
        image = np.random.default_rng(4).integers(0, 256, (64, 64, 3), np.uint8)
        served = client.segment(image, "road", score_thr=0.0, dedup=None)
        here = local_client.segment(image, "road", score_thr=0.0, dedup=None)
        assert len(served) == len(here) > 0
        np.testing.assert_allclose(served["score"].values, here["score"].values, atol=1e-4)
    finally:
        client.close()


@pytest.mark.napari
def test_connection_widget_fields_reach_the_client(
    make_napari_viewer, tls_server, certs, tmp_path, monkeypatch
):
    from napari_sam3.plugin.settings import load_connection
    from napari_sam3.plugin.widgets import ConnectionWidget
    from napari_sam3.plugin.widgets.connection import TRITON

    monkeypatch.setenv("NAPARI_SAM3_CONFIG_DIR", str(tmp_path / "config"))
    widget = ConnectionWidget(make_napari_viewer())
    widget.engine.value = TRITON
    assert widget.tls_root_cert.native.isHidden()  # only with TLS ticked
    widget.tls.value = True
    assert not widget.tls_root_cert.native.isHidden() and not widget.timeouts_row.native.isHidden()
    widget.address.value = tls_server
    widget.tls_root_cert.value = str(certs / "ca.pem")
    widget.connect_timeout.value = 2.5
    widget.request_timeout.value = 120
    settings = widget.settings()
    assert (settings.tls, settings.tls_root_cert) == (True, str(certs / "ca.pem"))
    assert (settings.connect_timeout, settings.request_timeout) == (2.5, 120)
    # This server wants a client certificate too (mutual TLS): refused within the 2.5 s asked.
    with pytest.raises(ConnectionError, match="within 2.5 s .*this client uses TLS"):
        connect(settings)
    assert load_connection() != settings  # a failed connection is not remembered

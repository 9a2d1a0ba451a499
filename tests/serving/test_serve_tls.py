"""`sam3-serve --tls-cert/--tls-key [--tls-root-cert]`: gRPC over TLS, checked with a raw
tritonclient and certificates made by the test; plaintext stays on loopback unless asked."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from napari_sam3.core import contract
from napari_sam3.prompts.tokenizer import tokenize
from napari_sam3.serving.ports import free_port
from napari_sam3.serving.tls import plaintext_warnings

needs_server = pytest.mark.needs_tritonserver


def _grpc(address: str, **tls):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(address, ssl=bool(tls), **tls)


def _text_features(client) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    tokens = tokenize("building")
    inp = grpcclient.InferInput(contract.TOKEN_IDS, list(tokens.shape), "INT64")
    inp.set_data_from_numpy(tokens)
    out = grpcclient.InferRequestedOutput(contract.TEXT_FEATURES)
    result = client.infer(contract.TEXT, [inp], outputs=[out], client_timeout=60)
    return result.as_numpy(contract.TEXT_FEATURES)


def _direct_text_features(repository: Path) -> np.ndarray:
    """The text graph run in this process as the server runs it (same runtime and precision)."""
    from napari_sam3.runtime import onnx_runner
    from napari_sam3.runtime.engines.model_config import load_model_configs

    config = load_model_configs(repository)[contract.TEXT]
    logic = onnx_runner.Logic(str(repository / contract.TEXT / "1"), config.parameters)
    return logic.run({contract.TOKEN_IDS: tokenize("building")})[contract.TEXT_FEATURES]


def _refused(client) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - tritonclient raises its own type
        client.is_server_ready(client_timeout=10)
    return str(info.value)


def _listening(serve) -> dict[int, str]:
    (server,) = [
        p for p in psutil.Process(serve.process.pid).children() if p.name() == "tritonserver"
    ]
    return {
        c.laddr.port: c.laddr.ip
        for c in server.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


@needs_server
def test_grpc_over_tls_with_a_test_certificate(sam3_serve, tiny_repository, certs):
    grpc, http = free_port(), free_port()
    serve = sam3_serve(tiny_repository, "--grpc-port", grpc, "--http-port", http,
                       "--tls-cert", certs / "server.pem", "--tls-key", certs / "server.key")  # fmt: skip
    serve.wait_for(f"ready on grpc\\+tls 127.0.0.1:{grpc}", timeout=240)
    address = f"127.0.0.1:{grpc}"
    secure = _grpc(address, root_certificates=str(certs / "ca.pem"))
    assert secure.is_server_ready() and secure.is_model_ready(contract.SEGMENT)
    np.testing.assert_allclose(
        _text_features(secure), _direct_text_features(tiny_repository), atol=1e-5
    )
    # Plaintext, or TLS without trusting the CA, gets nothing.
    _refused(_grpc(address))
    assert "CERTIFICATE_VERIFY_FAILED" in _refused(_grpc(address, root_certificates=None))
    # Both endpoints on loopback by default (the HTTP one is always plaintext).
    ports = _listening(serve)
    for port in (grpc, http):
        ip = ipaddress.ip_address(ports[port])
        assert (getattr(ip, "ipv4_mapped", None) or ip).is_loopback, ports


@needs_server
def test_mutual_tls_requires_a_client_certificate(sam3_serve, tiny_repository, certs):
    grpc = free_port()
    serve = sam3_serve(tiny_repository, "--grpc-port", grpc, "--http-port", free_port(),
                       "--tls-cert", certs / "server.pem", "--tls-key", certs / "server.key",
                       "--tls-root-cert", certs / "ca.pem", "--timeout", 200)  # fmt: skip
    # sam3-serve gives up first (--timeout) and says why: a slow start fails with its reason
    serve.wait_for("ready on grpc\\+tls", timeout=240)
    address = f"127.0.0.1:{grpc}"
    _refused(_grpc(address, root_certificates=str(certs / "ca.pem")))
    client = _grpc(
        address,
        root_certificates=str(certs / "ca.pem"),
        private_key=str(certs / "client.key"),
        certificate_chain=str(certs / "client.pem"),
    )
    assert client.is_server_ready()
    np.testing.assert_allclose(
        _text_features(client), _direct_text_features(tiny_repository), atol=1e-5
    )


def _serve(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "napari_sam3.serving.command", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_tls_input_is_refused_in_one_line(tiny_repository, certs, tmp_path):
    not_pem = tmp_path / "key.txt"
    not_pem.write_text("not a key\n")
    ports = ("--grpc-port", free_port(), "--http-port", free_port())
    cases = [
        (("--tls-cert", certs / "server.pem"), "--tls-cert and --tls-key together"),
        (("--tls-cert", tmp_path / "nope.pem", "--tls-key", certs / "server.key"), "no file at"),
        (("--tls-cert", certs / "server.pem", "--tls-key", not_pem), "not a PEM file"),
        (("--tls-root-cert", certs / "ca.pem"), "--tls-root-cert needs --tls-cert"),
    ]
    for args, message in cases:
        result = _serve(tiny_repository, *ports, *args)
        assert result.returncode == 2, (args, result)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr and "ready" not in result.stdout


def test_plaintext_beyond_loopback_is_warned_about():
    assert plaintext_warnings("127.0.0.1", "127.0.0.1", tls=False) == []
    assert plaintext_warnings("::1", "localhost", tls=False) == []
    (grpc_warning,) = plaintext_warnings("0.0.0.0", "127.0.0.1", tls=False)
    assert "plaintext" in grpc_warning and "--tls-cert" in grpc_warning
    assert plaintext_warnings("0.0.0.0", "127.0.0.1", tls=True) == []
    (http_warning,) = plaintext_warnings("0.0.0.0", "192.168.1.5", tls=True)
    assert "HTTP on 192.168.1.5 is plaintext" in http_warning

"""`sam3-serve` validates its ports and never reports ready from someone else's server."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading

import pytest

from napari_sam3.serving.ports import PortError, free_port
from napari_sam3.serving.server import TritonServer


def _serve(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "napari_sam3.serving.command", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("port", ["99999", "0", "-1", "80x"])
def test_an_out_of_range_port_is_a_usage_error(tiny_repository, port):
    result = _serve(tiny_repository, "--grpc-port", port, "--http-port", free_port())
    assert result.returncode == 2, result
    assert "--grpc-port" in result.stderr and (
        "1..65535" in result.stderr or "not a port" in result.stderr
    )
    assert "ready" not in result.stdout


def test_the_library_refuses_an_out_of_range_port(tiny_repository):
    with pytest.raises(PortError, match="1..65535"):
        TritonServer(tiny_repository, grpc_port=99999).start()
    with pytest.raises(PortError, match="both"):
        port = free_port()
        TritonServer(tiny_repository, grpc_port=port, http_port=port).start()


def test_a_grpc_port_in_use_is_refused(tiny_repository):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(tiny_repository, "--grpc-port", port, "--http-port", free_port())
    assert result.returncode == 2, result
    assert f"grpc port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "ready" not in result.stdout


class _AlwaysReady(http.server.BaseHTTPRequestHandler):
    """Another server on the port, answering every health check (and anything else) with 200."""

    def _ok(self) -> None:
        body = b'[{"name": "sam3_segment", "state": "READY"}]'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _ok

    def log_message(self, *args) -> None:
        pass


def test_another_server_answering_health_on_the_http_port_is_not_taken_for_ours(tiny_repository):
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AlwaysReady)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        port = other.server_address[1]
        result = _serve(tiny_repository, "--grpc-port", free_port(), "--http-port", port)
    finally:
        other.shutdown()
        other.server_close()
    assert result.returncode == 2, result
    assert f"http port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "ready" not in result.stdout

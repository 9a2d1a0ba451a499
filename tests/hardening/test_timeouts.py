"""Timeouts that end: a stopped server is given up on, a slow but live one is waited for.

On the code before: a stopped (SIGSTOP) server blocked each call for about 1,204 s with the
defaults (300 s x 4 tries), the CLI could set neither timeout, and `--server` pointing at
nothing took 31 s to fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.runtime.engines.triton import RequestTimeout
from napari_sam3.serving.ports import free_port

needs_server = pytest.mark.needs_tritonserver

SLEEPY = "test_sleepy"  # the Python model the conftest adds to the repository

pytestmark = needs_server


def _sleep(client: Sam3Client, seconds: float) -> float:
    out = client.engine.infer(SLEEPY, {"seconds": np.array([seconds], np.float32)}, ["slept"])
    return float(out["slept"][0])


def _stop_after(pid: int, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (pid, signal.SIGSTOP))
    timer.start()
    return timer


def test_a_slow_request_on_a_live_server_succeeds(slow_server):
    """A request far longer than the liveness window: the server answers the probes meanwhile."""
    client = Sam3Client(slow_server.grpc_address, connect_timeout=60, liveness_timeout=2.0)
    client.engine.probe_interval = 0.5
    start = time.monotonic()
    assert _sleep(client, 12.0) == 12.0
    assert time.monotonic() - start >= 12.0
    client.close()


def test_a_stopped_server_fails_a_default_client_within_a_minute(slow_server):
    client = Sam3Client(slow_server.grpc_address, connect_timeout=60)
    assert _sleep(client, 0.0) == 0.0
    timer = _stop_after(slow_server.process.pid, 2.0)
    start = time.monotonic()
    try:
        with pytest.raises(ConnectionError, match=f"{slow_server.grpc_address} stopped answering"):
            _sleep(client, 45.0)
        took = time.monotonic() - start
    finally:
        timer.cancel()
        os.kill(slow_server.process.pid, signal.SIGCONT)
    assert took < 60, f"gave up after {took:.0f} s"
    # A call that starts while the server is stopped ends too (the same watch).
    os.kill(slow_server.process.pid, signal.SIGSTOP)
    start = time.monotonic()
    try:
        with pytest.raises(ConnectionError, match="stopped answering"):
            client.segment(np.zeros((64, 64, 3), np.uint8), "building")
        took = time.monotonic() - start
    finally:
        os.kill(slow_server.process.pid, signal.SIGCONT)
    assert took < 60, f"gave up after {took:.0f} s"
    # Resumed, the same client works again.
    assert _sleep(client, 0.0) == 0.0
    client.close()


def test_a_try_that_runs_out_of_time_is_not_retried(slow_server):
    client = Sam3Client(slow_server.grpc_address, connect_timeout=60, request_timeout=2.0)
    start = time.monotonic()
    with pytest.raises(RequestTimeout, match="within 2 s.*--request-timeout"):
        _sleep(client, 8.0)
    assert time.monotonic() - start < 6, "the try was retried"
    client.close()


def test_nothing_listening_fails_within_the_connect_timeout():
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"no ready Triton server at {address} within 3 s"):
        Sam3Client(address, connect_timeout=3)
    assert time.monotonic() - start < 3 + 3
    for bad in (0, -1, float("nan"), "10"):
        with pytest.raises(ValueError, match="connect_timeout"):
            Sam3Client(address, connect_timeout=bad)


def test_cli_timeouts(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "napari_sam3.cli", "info", "--server", address,
         "--connect-timeout", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert result.returncode == 1 and "within 2 s" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    # The wait itself is 2 s; the rest is starting Python (slow on a busy 2-core machine).
    assert elapsed < 60
    result = subprocess.run(
        [sys.executable, "-m", "napari_sam3.cli", "info", "--server", address,
         "--request-timeout", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "--request-timeout must be a positive" in result.stderr

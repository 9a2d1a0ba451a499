"""Timeouts that end: a stopped server is given up on, a slow but live one is waited for.

On the code before: a stopped (SIGSTOP) server blocked each call for about 1,204 s with the
defaults (300 s x 4 tries), the CLI could set neither timeout, and `--server` pointing at
nothing took 31 s to fail.

Every limit here is small and configured; what proves that a limit fired, and fired in time, is
the error (its type, which limit, which address) and the sleepy model's journal (whether the
server was still working on the request when the client gave up), not a clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.client.connection import DEFAULT_LIVENESS_TIMEOUT
from napari_sam3.runtime.engines.triton import RequestTimeout
from napari_sam3.serving.ports import free_port

needs_server = pytest.mark.needs_tritonserver

SLEEPY = "test_sleepy"  # the Python model the conftest adds to the repository

pytestmark = needs_server


def _sleep(client: Sam3Client, seconds: float, tag: int = 0) -> float:
    inputs = {"seconds": np.array([seconds], np.float32), "tag": np.array([tag], np.int64)}
    return float(client.engine.infer(SLEEPY, inputs, ["slept"])["slept"][0])


def test_a_slow_request_on_a_live_server_succeeds(slow_server, journal):
    """A request three times the liveness window: the server answers the probes meanwhile."""
    client = Sam3Client(slow_server.grpc_address, connect_timeout=60, liveness_timeout=1.0)
    client.engine.probe_interval = 0.2
    tag = journal.new_tag()
    assert _sleep(client, 3.0, tag) == 3.0
    # the server slept all 3 s before answering (not a cut-short request)
    assert journal.entries(tag) == ["start", "end"]
    client.close()


def test_a_stopped_server_is_given_up_on_after_the_liveness_timeout(slow_server, journal):
    pid = slow_server.process.pid
    address = slow_server.grpc_address
    # Were the liveness watch not to fire, the request timeout would, with its own message.
    client = Sam3Client(address, connect_timeout=60, request_timeout=30, liveness_timeout=1.0)
    client.engine.probe_interval = 0.2
    assert _sleep(client, 0.0) == 0.0
    tag = journal.new_tag()

    def stop_once_running() -> None:
        if journal.wait_for("start", tag):
            os.kill(pid, signal.SIGSTOP)

    stopper = threading.Thread(target=stop_once_running)
    stopper.start()
    try:
        with pytest.raises(ConnectionError, match=f"{address} stopped answering") as error:
            _sleep(client, 3.0, tag)
    finally:
        stopper.join()
        os.kill(pid, signal.SIGCONT)
    assert not isinstance(error.value, RequestTimeout)
    assert f"running {SLEEPY}: no liveness answer" in str(error.value)
    # A call that starts while the server is stopped ends too (the same watch).
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(ConnectionError, match=f"{address} stopped answering"):
            client.segment(np.zeros((64, 64, 3), np.uint8), "building")
    finally:
        os.kill(pid, signal.SIGCONT)
    # Resumed, the same client works again.
    assert _sleep(client, 0.0) == 0.0
    client.close()
    # A client made with the defaults has the same watch, its limit under a minute.
    default = Sam3Client(address, connect_timeout=60)
    assert default.engine.liveness_timeout == DEFAULT_LIVENESS_TIMEOUT
    assert default.engine.liveness_timeout + default.engine.probe_interval < 60
    default.close()


def test_a_try_that_runs_out_of_time_is_not_retried(slow_server, journal):
    # a deadline with room for more tries: only the rule keeps a timed-out try from a retry
    client = Sam3Client(slow_server.grpc_address, connect_timeout=60, request_timeout=0.5,
                        deadline=30)  # fmt: skip
    tag = journal.new_tag()
    with pytest.raises(
        RequestTimeout, match=r"did not finish test_sleepy within 0\.5 s.*--request"
    ):
        _sleep(client, 1.5, tag)
    # given up on while the server still slept: the one try started, none finished or followed
    assert journal.entries(tag) == ["start"], "retried, or the timeout fired after the answer"
    assert journal.wait_for("end", tag)  # the server finishes it on its own
    assert journal.entries(tag) == ["start", "end"]
    client.close()


def test_nothing_listening_fails_with_the_connect_timeout():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionError) as error:
        Sam3Client(address, connect_timeout=0.5)
    message = str(error.value)
    assert message.startswith(f"no ready Triton server at {address} within 0.5 s (")
    assert "refused" in message and "raise connect_timeout" in message
    for bad in (0, -1, float("nan"), "10"):
        with pytest.raises(ValueError, match="connect_timeout"):
            Sam3Client(address, connect_timeout=bad)


def test_cli_timeouts(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    result = subprocess.run(
        [sys.executable, "-m", "napari_sam3.cli", "info", "--server", address,
         "--connect-timeout", "0.5"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"no ready Triton server at {address} within 0.5 s" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "napari_sam3.cli", "info", "--server", address,
         "--request-timeout", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "--request-timeout must be a positive" in result.stderr

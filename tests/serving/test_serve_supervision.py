"""`sam3-serve` supervises its server: a dead stub is repaired or reported, and the server (stubs,
shared memory) goes with the wrapper, whatever ends it."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import numpy as np
import psutil
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.serving.binary import STUB_NAME
from napari_sam3.serving.ports import free_port
from napari_sam3.serving.processes import SHM_PREFIX

pytestmark = pytest.mark.needs_tritonserver


@pytest.fixture
def repo(tiny_repository, tmp_path) -> Path:
    # A copy of its own, so that its stubs are told apart from other servers' by their paths.
    return Path(shutil.copytree(tiny_repository, tmp_path / "supervised"))


def _start(sam3_serve, repo: Path):
    grpc = free_port()
    serve = sam3_serve(repo, "--grpc-port", grpc, "--http-port", free_port(), "--probe-interval", 1)
    serve.wait_for(f"ready on grpc 127.0.0.1:{grpc}", timeout=240)
    (server,) = [
        p for p in psutil.Process(serve.process.pid).children() if p.name() == "tritonserver"
    ]
    return serve, server, f"127.0.0.1:{grpc}"


def _stubs(server: psutil.Process) -> dict[str, psutil.Process]:
    """Our server's stub processes by model (the model folder in the stub's first argument)."""
    return {
        Path(p.cmdline()[1]).parent.parent.name: p
        for p in server.children()
        if p.name() == STUB_NAME
    }


def _regions(stubs) -> set[str]:
    return {a for p in stubs for a in p.cmdline() if a.startswith(SHM_PREFIX)}


def _wait_gone(processes, timeout: float) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    return alive


def test_sigkill_of_the_wrapper_takes_the_server_its_stubs_and_shared_memory(sam3_serve, repo):
    serve, server, _ = _start(sam3_serve, repo)
    stubs = list(_stubs(server).values())
    regions = _regions(stubs)
    assert len(stubs) >= 8 and len(regions) == len(stubs)
    assert all(os.path.exists(f"/dev/shm/{r}") for r in regions)
    serve.process.send_signal(signal.SIGKILL)
    alive = _wait_gone([server, *stubs], timeout=60)
    assert not alive, f"still running after the wrapper was killed: {alive}"
    left = [r for r in regions if os.path.exists(f"/dev/shm/{r}")]
    assert not left, f"shared memory left behind: {left}"


def test_a_dead_stub_is_detected_and_its_model_reloaded(sam3_serve, repo):
    serve, server, address = _start(sam3_serve, repo)
    client = Sam3Client(address, connect_timeout=10)
    image = np.random.default_rng(0).integers(0, 256, (80, 96, 3), dtype=np.uint8)
    before = client.segment(image, "building", score_thr=0.0)
    assert len(before) > 0
    stub = _stubs(server)[contract.DECODER]
    stub.kill()
    line = serve.wait_for(contract.DECODER, timeout=60)
    assert "stub" in line and "died" in line and "reloaded" in line, line
    new_stub = _stubs(server)[contract.DECODER]
    assert new_stub.pid != stub.pid
    after = client.segment(image, "building", score_thr=0.0)
    np.testing.assert_allclose(after["score"].values, before["score"].values, atol=1e-6)
    assert serve.process.poll() is None


def test_a_stub_that_cannot_come_back_is_reported_and_the_server_stopped(sam3_serve, repo):
    serve, server, _ = _start(sam3_serve, repo)
    stubs = list(_stubs(server).values())
    regions = _regions(stubs)
    # The model's code breaks on disk, then its stub dies: the reload must fail, loudly.
    model_py = repo / contract.TEXT / "1" / "model.py"
    model_py.write_text(model_py.read_text() + '\nraise ImportError("gone for good")\n')
    _stubs(server)[contract.TEXT].kill()
    line = serve.wait_for("unhealthy", timeout=90)
    assert contract.TEXT in line and "gone for good" in line, line
    assert serve.process.wait(60) == 1
    assert not _wait_gone([server, *stubs], timeout=30)
    # sam3-serve removed its server's regions before it exited
    assert not [r for r in regions if os.path.exists(f"/dev/shm/{r}")]

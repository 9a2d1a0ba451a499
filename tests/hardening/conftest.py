"""Servers for the hardening tests: the tiny repository plus a Python model that takes its time."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from .._sleepy import Journal, add_sleepy


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Journal:
    return Journal(tmp_path_factory.mktemp("journal") / "sleepy.txt")


@pytest.fixture(scope="module")
def slow_repository(tiny_repository, journal, tmp_path_factory) -> Path:
    """A copy of the tiny repository with one more model, `test_sleepy`, written by the test."""
    repo = tmp_path_factory.mktemp("slow") / "repository"
    shutil.copytree(tiny_repository, repo)
    add_sleepy(repo, journal)
    return repo


@pytest.fixture(scope="module")
def slow_server(slow_repository, tmp_path_factory):
    """A real tritonserver for the module (a test may stop it with SIGSTOP; it is resumed)."""
    from napari_sam3.serving.server import TritonServer

    log = tmp_path_factory.mktemp("slow_server") / "tritonserver.log"
    with TritonServer(slow_repository, log_file=log) as server:
        try:
            yield server
        finally:
            if server.process is not None and server.process.poll() is None:
                os.kill(server.process.pid, signal.SIGCONT)

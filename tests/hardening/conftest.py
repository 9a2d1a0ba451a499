"""Servers for the hardening tests: the tiny repository plus a Python model that takes its time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SLEEPY = "test_sleepy"
SLEEPY_CONFIG = f"""name: "{SLEEPY}"
backend: "python"
max_batch_size: 0
input [ {{ name: "seconds" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "slept" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
"""
SLEEPY_MODEL = '''
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sleeps as many seconds as asked: a legitimately slow request."""

    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "seconds").as_numpy()
            time.sleep(float(seconds[0]))
            out = pb_utils.Tensor("slept", seconds.astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''


@pytest.fixture(scope="module")
def slow_repository(tiny_repository, tmp_path_factory) -> Path:
    """A copy of the tiny repository with one more model, `test_sleepy`, written by the test."""
    repo = tmp_path_factory.mktemp("slow") / "repository"
    shutil.copytree(tiny_repository, repo)
    (repo / SLEEPY / "1").mkdir(parents=True)
    (repo / SLEEPY / "config.pbtxt").write_text(SLEEPY_CONFIG)
    (repo / SLEEPY / "1" / "model.py").write_text(SLEEPY_MODEL)
    return repo


@pytest.fixture
def slow_server(slow_repository, tmp_path):
    """A real tritonserver of its own (a test may stop it with SIGSTOP; it is resumed after)."""
    import os
    import signal

    from napari_sam3.serving.server import TritonServer

    server = TritonServer(slow_repository, log_file=tmp_path / "tritonserver.log")
    with server:
        try:
            yield server
        finally:
            if server.process is not None and server.process.poll() is None:
                os.kill(server.process.pid, signal.SIGCONT)

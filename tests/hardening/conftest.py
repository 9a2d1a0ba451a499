"""Servers for the hardening tests: the tiny repository plus a Python model that takes its time."""

from __future__ import annotations

import shutil
import subprocess
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

    from napari_sam3.serve import TritonServer

    server = TritonServer(slow_repository, log_file=tmp_path / "tritonserver.log")
    with server:
        try:
            yield server
        finally:
            if server.process is not None and server.process.poll() is None:
                os.kill(server.process.pid, signal.SIGCONT)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """A test CA; a server certificate for localhost / 127.0.0.1 / ::1 and a client certificate
    signed by it; and a second CA that signed nothing here."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test certificates")
    d = tmp_path_factory.mktemp("certs")
    for ca in ("ca", "other_ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                 "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=sam3 test {ca}",
                 cwd=d)  # fmt: skip
    (d / "server.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n"
    )
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out",
                 f"{who}.csr", "-subj", f"/CN={who}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{who}.pem", "-days", "2", "-extfile",
                 f"{who}.ext", cwd=d)  # fmt: skip
    return d

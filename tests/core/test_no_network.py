"""No telemetry, no network: the package, the embedded engine, `sam3-export` and `sam3-serve`
open no socket except to loopback, and write nothing under HOME but the project's cache folder.

Each run is a subprocess with HOME pointing at an empty folder and without the CI markers that
would make OpenVINO's telemetry decline on its own (so the test sees what an analyst's machine
does). Python's audit hooks see every socket the Python processes open; `strace -f` (installed
by scripts/setup.sh) sees every process, tritonserver and its stubs included (the watch lives
in tests/_network_watch.py; the `sam3-export` run is watched in tests/export/test_checkpoint.py,
where the same run also checks the exported graphs).
"""

from __future__ import annotations

import sys

import pytest

from .._network_watch import (
    assert_offline,
    files_under,
    python_addresses,
    run_watched,
    strace_addresses,
    watched_environment,
)

SCRIPT = """
import sys
import numpy as np
import napari_sam3
from napari_sam3 import Sam3Client
from napari_sam3.serving.server import TritonServer

repo = sys.argv[1]
image = (np.random.default_rng(0).random((3, 96, 128)) * 3000).astype(np.uint16)
with Sam3Client.local(repo) as client:  # the embedded default: OpenVINO
    client.segment(image, "field", score_thr=0.0)
with TritonServer(repo) as server:  # sam3-serve's server: stubs import OpenVINO too
    with Sam3Client(server.grpc_address) as client:
        client.segment(image, "field", score_thr=0.0)
print("ran")
"""

# Imports the libraries, then lives until their telemetry shows in all three guards (what the
# test reads below; at most 120 s, after which the test fails naming what is missing).
UNTIL_TELEMETRY_SEEN = """
import sys, time
from pathlib import Path
import openvino, onnxruntime

log, home, trace = map(Path, sys.argv[1:4])

def seen():
    events = log / "events.jsonl"
    python = events.exists() and "www.google-analytics.com" in events.read_text()
    dns = trace.exists() and "htons(53)" in trace.read_text(errors="replace")
    return python and dns and any(p.is_file() for p in (home / "intel").rglob("*"))

end = time.monotonic() + 120
while not seen() and time.monotonic() < end:
    time.sleep(0.05)
"""


@pytest.mark.needs_tritonserver  # the script starts sam3-serve's TritonServer
def test_the_embedded_engine_and_sam3_serve_stay_on_loopback(tiny_repository, tmp_path):
    env, home, log = watched_environment(tmp_path)
    done, trace = run_watched([sys.executable, "-c", SCRIPT, str(tiny_repository)], env, tmp_path)
    assert_offline(done, trace, home, log)
    assert "ran" in done.stdout
    assert any(f.startswith(".cache/napari-sam3/openvino/") for f in files_under(home))


def test_the_guards_see_telemetry_when_it_is_not_declined(tmp_path):
    """The same guards on plain imports: they must catch what the package switches off
    (OpenVINO's telemetry resolving its collector and writing ~/intel; ONNX Runtime's uploader
    looking up its collector from a native thread, seen by strace alone)."""
    env, home, log = watched_environment(tmp_path)
    trace = tmp_path / "strace.log"  # where run_watched has strace write
    command = [sys.executable, "-c", UNTIL_TELEMETRY_SEEN, str(log), str(home), str(trace)]
    done, trace = run_watched(command, env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "www.google-analytics.com" in python_addresses(log)
    assert any(f.startswith("intel/") for f in files_under(home))
    assert any(a.startswith("dns:") for a in strace_addresses(trace))

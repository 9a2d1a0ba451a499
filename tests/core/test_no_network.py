"""No telemetry, no network: the package, the embedded engine, `sam3-export` and `sam3-serve`
open no socket except to loopback, and write nothing under HOME but the project's cache folder.

Each run is a subprocess with HOME pointing at an empty folder and without the CI markers that
would make OpenVINO's telemetry decline on its own (so the test sees what an analyst's machine
does). Python's audit hooks see every socket the Python processes open; `strace -f` (installed
by scripts/setup.sh) sees every process, tritonserver and its stubs included.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

# what would switch the libraries' telemetry off without the package doing it
OPT_OUTS = ("CI", "TF_BUILD", "JENKINS_URL", "ORT_DISABLE_TELEMETRY")
LOOPBACK = re.compile(r"^(127\.|::1$|::ffff:127\.|localhost$|0\.0\.0\.0$|::$)")

# Installed in every Python process of the run (through sitecustomize on PYTHONPATH): records
# each socket address a process resolves, connects or sends to.
SITECUSTOMIZE = """
import json, os, sys

_LOG = os.path.join(os.environ["SAM3_NET_LOG"], "events.jsonl")

def _write(event, address):
    # appended at once: a forked child (OpenVINO's telemetry sends from one) never runs atexit
    with open(_LOG, "a") as f:
        f.write(json.dumps([os.getpid(), event, address]) + "\\n")

def _hook(event, args):
    if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
        _write(event, str(args[0]))
    elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        if isinstance(args[1], tuple):
            _write(event, str(args[1][0]))

_write("started", "")
sys.addaudithook(_hook)
"""

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


def _environment(tmp_path: Path) -> tuple[dict, Path, Path]:
    home, log, site = tmp_path / "home", tmp_path / "netlog", tmp_path / "site"
    for folder in (home, log, site):
        folder.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    env = {k: v for k, v in os.environ.items() if k not in OPT_OUTS and k != "XDG_CACHE_HOME"}
    env.update(
        HOME=str(home),
        SAM3_NET_LOG=str(log),
        PYTHONPATH=os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")])),
    )
    return env, home, log


def _python_addresses(log: Path) -> set[str]:
    """Addresses the Python processes resolved or reached (the guard must have started)."""
    lines = (log / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert any(event == "started" for _, event, _ in events), "the guard did not start"
    return {address for _, event, address in events if event != "started"}


def _strace_addresses(trace: Path) -> set[str]:
    """Peer addresses of connect/sendto/sendmsg/sendmmsg calls in an `strace -f` log; a DNS
    query counts as "dns:<resolver>" whatever the resolver's address (it may be on loopback):
    loopback names come from /etc/hosts, so any DNS query looks up some other host."""
    seen = set()
    for line in trace.read_text(errors="replace").splitlines():
        if not re.search(r"\b(connect|sendto|sendmsg|sendmmsg)\(", line):
            continue
        addresses = set(re.findall(r'inet_addr\("([^"]+)"\)', line))
        addresses |= set(re.findall(r'inet_pton\(AF_INET6?, "([^"]+)"', line))
        if "htons(53)" in line:
            addresses = {f"dns:{a}" for a in addresses} or {"dns:?"}
        seen |= addresses
    return seen


def _outside_loopback(addresses: set[str]) -> set[str]:
    return {a for a in addresses if a.startswith("dns:") or not LOOPBACK.match(a)}


def _files_under(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


def _run(command: list[str], env: dict, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    trace = tmp_path / "strace.log"
    strace = shutil.which("strace")
    assert strace, "strace is missing: scripts/setup.sh installs it"
    full = [strace, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg,sendmmsg", "-o", str(trace)]
    done = subprocess.run(
        [*full, *command], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    return done, trace


def _check(done, trace: Path, home: Path, log: Path) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    python_seen = _python_addresses(log)
    assert not _outside_loopback(python_seen), python_seen
    assert not _outside_loopback(_strace_addresses(trace)), _strace_addresses(trace)
    outside = [f for f in _files_under(home) if not f.startswith(".cache/napari-sam3/")]
    assert not outside, outside


def test_the_embedded_engine_and_sam3_serve_stay_on_loopback(tiny_repository, tmp_path):
    env, home, log = _environment(tmp_path)
    done, trace = _run([sys.executable, "-c", SCRIPT, str(tiny_repository)], env, tmp_path)
    _check(done, trace, home, log)
    assert "ran" in done.stdout
    assert any(f.startswith(".cache/napari-sam3/openvino/") for f in _files_under(home))


def test_sam3_export_stays_offline(tmp_path):
    env, home, log = _environment(tmp_path)
    export = Path(sys.executable).with_name("sam3-export")
    command = [str(export), "--random-weights", "--size", "tiny", "--out", "repo", "-q"]
    done, trace = _run(command, env, tmp_path)
    _check(done, trace, home, log)
    assert (tmp_path / "repo" / "sam3_manifest.json").is_file()


def test_the_guards_see_telemetry_when_it_is_not_declined(tmp_path):
    """The same guards on plain imports: they must catch what the package switches off
    (OpenVINO's telemetry resolving its collector and writing ~/intel; ONNX Runtime's uploader
    looking up its collector from a native thread, seen by strace alone)."""
    env, home, log = _environment(tmp_path)
    code = "import openvino, onnxruntime, time; time.sleep(15)"
    done, trace = _run([sys.executable, "-c", code], env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "www.google-analytics.com" in _python_addresses(log)
    assert any(f.startswith("intel/") for f in _files_under(home))
    assert any(a.startswith("dns:") for a in _strace_addresses(trace))

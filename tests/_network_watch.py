"""Watching a command for network use: every Python process through an audit hook (loaded by
sitecustomize), every process through `strace -f`, and what it writes under an empty HOME.
Used by tests/core/test_no_network.py and by the export CLI run in tests/export."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
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


def watched_environment(tmp_path: Path) -> tuple[dict, Path, Path]:
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


def python_addresses(log: Path) -> set[str]:
    """Addresses the Python processes resolved or reached (the guard must have started)."""
    lines = (log / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert any(event == "started" for _, event, _ in events), "the guard did not start"
    return {address for _, event, address in events if event != "started"}


def strace_addresses(trace: Path) -> set[str]:
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


def outside_loopback(addresses: set[str]) -> set[str]:
    return {a for a in addresses if a.startswith("dns:") or not LOOPBACK.match(a)}


def files_under(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


def run_watched(
    command: list[str], env: dict, tmp_path: Path
) -> tuple[subprocess.CompletedProcess, Path]:
    trace = tmp_path / "strace.log"
    strace = shutil.which("strace")
    assert strace, "strace is missing: scripts/setup.sh installs it"
    full = [
        strace,
        "-f",
        "--seccomp-bpf",
        "-qq",
        "-e",
        "trace=connect,sendto,sendmsg,sendmmsg",
        "-o",
        str(trace),
    ]
    done = subprocess.run(
        [*full, *command], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    return done, trace


def assert_offline(done, trace: Path, home: Path, log: Path) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    python_seen = python_addresses(log)
    assert not outside_loopback(python_seen), python_seen
    assert not outside_loopback(strace_addresses(trace)), strace_addresses(trace)
    outside = [f for f in files_under(home) if not f.startswith(".cache/napari-sam3/")]
    assert not outside, outside

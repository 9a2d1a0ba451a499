"""A real HTTP server on loopback for the remote-raster tests: byte ranges, counted bytes, and the
misbehaviours a network has (a missing file, a hanging answer, a refusal without credentials), and
scripted faults per path (:class:`Fault`): bursts of 503/429 with ``Retry-After``, a connection
reset mid-body, a body cut short, a 206 shorter than asked, a stall, a trickle of one byte a second.

It runs in a child process (``python http_server.py FOLDER``), not a thread of the tests: GDAL
makes some of its requests while holding Python's GIL, which a server thread of the same process
would need to answer them. The tests talk to it over HTTP: ``/__stats`` gives the bytes served,
the requests seen and the faults given; ``/__config`` sets the paths that hang, the token
required and the fault scripts.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_CONTENT_TYPES = {
    ".json": "application/json",
    ".tif": "image/tiff",
    ".html": "text/html",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".xml": "text/xml",
}


# What a fault does to one request (every one answers with the file's real bytes, or none):
#   status    answer ``code`` (503, 429, ...) with no body, ``Retry-After: retry_after`` if given
#   reset     send the headers and half the body, then reset the connection (TCP RST)
#   short     send the headers (the full Content-Length) and half the body, then close
#   short206  a 206 whose Content-Range and Content-Length cover only the first half of the range
#   stall     accept the request and never answer (until the server stops)
#   trickle   send the headers, then the body one byte a second
FAULT_KINDS = ("status", "reset", "short", "short206", "stall", "trickle")


@dataclass(frozen=True)
class Fault:
    """One step of a path's fault script: ``kind`` for the next ``times`` requests of the path
    (0: every one from then on), after ``after`` requests of it answered normally. With ``ranged``
    only range requests count (a client's first whole-file probe passes)."""

    kind: str
    times: int = 1
    after: int = 0
    code: int = 503
    retry_after: int | None = None
    ranged: bool = False

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {FAULT_KINDS}")


class RangeServer:
    """Serves the files of a folder at ``http://127.0.0.1:PORT/``, honouring single
    ``Range: bytes=a-b`` requests as static servers and object stores do (206, ``Content-Range``,
    416 past the end).

    :attr:`served` counts the body bytes sent for each path and :attr:`requests` lists every
    (method, path, Range header). ``hang`` paths wait (until the server stops) before answering;
    with ``token`` set every path needs ``Authorization: Bearer <token>`` (else 401). ``faults``
    maps a path (``/B04.tif``) to its script of :class:`Fault` steps, played in order;
    :attr:`faults_given` counts the faulty answers each path got.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.hang: set[str] = set()
        self.token: str | None = None
        self.faults: dict[str, list[Fault]] = {}
        self._process: subprocess.Popen | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def add(self, path: str, data: bytes | Path) -> str:
        """Serve ``data`` (bytes or a file's content) at ``/path``; its URL."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.read_bytes() if isinstance(data, Path) else bytes(data))
        return self.url(path)

    def configure(self) -> None:
        """Send :attr:`hang`, :attr:`token` and :attr:`faults` to the server (fault scripts
        start again from their first step)."""
        faults = {path: [asdict(f) for f in steps] for path, steps in self.faults.items()}
        body = json.dumps({"hang": sorted(self.hang), "token": self.token, "faults": faults})
        urllib.request.urlopen(
            urllib.request.Request(self.url("__config"), body.encode()), timeout=10
        )

    def script(self, path: str, *steps: Fault) -> str:
        """Set ``path``'s fault script (and send it); the path's URL."""
        self.faults["/" + path.lstrip("/")] = list(steps)
        self.configure()
        return self.url(path)

    def _stats(self) -> dict:
        with urllib.request.urlopen(self.url("__stats"), timeout=10) as answer:
            return json.loads(answer.read())

    @property
    def served(self) -> Counter[str]:
        return Counter(self._stats()["served"])

    @property
    def requests(self) -> list[tuple[str, str, str | None]]:
        return [tuple(r) for r in self._stats()["requests"]]

    @property
    def faults_given(self) -> Counter[str]:
        return Counter(self._stats()["faults_given"])

    def bytes_for(self, *paths: str) -> int:
        served = self.served
        return sum(served["/" + p.lstrip("/")] for p in paths)

    def reset_counts(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url("__reset"), b""), timeout=10)

    def __enter__(self) -> RangeServer:
        self._process = subprocess.Popen(
            [sys.executable, __file__, str(self.root)], stdout=subprocess.PIPE, text=True
        )
        self.port = int(self._process.stdout.readline())
        return self

    def __exit__(self, *exc) -> None:
        self._process.terminate()
        self._process.wait(10)


class _Script:
    """A path's fault steps as the server plays them: which fault (if any) the next request gets."""

    def __init__(self, steps: list[dict]) -> None:
        self.steps = [Fault(**step) for step in steps]
        self.seen = 0  # requests of the path that counted (ranged ones only, for a ranged step)
        self.used = 0  # faulty answers given by the current step

    def next(self, ranged: bool) -> Fault | None:
        while self.steps:
            step = self.steps[0]
            if step.ranged and not ranged:
                return None
            self.seen += 1
            if self.seen <= step.after:
                return None
            self.used += 1
            if step.times and self.used >= step.times:
                self.steps.pop(0)
                self.seen = self.used = 0
            return step
        return None


def _get_map(raster: Path, request: str) -> bytes:
    """A minimal WMS GetMap (the parameters GDAL's WMS driver sends): ``BBOX`` (minx, miny,
    maxx, maxy in the raster's CRS), ``WIDTH``, ``HEIGHT``; the raster's pixels there (nearest),
    transparent outside it, as a PNG. ``/wms`` answers it when the folder holds ``wms.tif``."""
    from urllib.parse import parse_qs, urlparse

    import numpy as np
    import rasterio
    from rasterio.enums import Resampling
    from rasterio.io import MemoryFile
    from rasterio.windows import from_bounds

    query = {k.upper(): v[0] for k, v in parse_qs(urlparse(request).query).items()}
    minx, miny, maxx, maxy = (float(v) for v in query["BBOX"].split(","))
    width, height = int(query["WIDTH"]), int(query["HEIGHT"])
    with rasterio.open(raster) as src:
        window = from_bounds(minx, miny, maxx, maxy, src.transform)
        data = src.read(window=window, out_shape=(src.count, height, width), boundless=True,
                        fill_value=0, resampling=Resampling.nearest)  # fmt: skip
    with MemoryFile() as memory:
        with memory.open(driver="PNG", count=data.shape[0], height=height, width=width,
                         dtype=np.uint8) as png:  # fmt: skip
            png.write(data)
        return memory.read()


def _serve(root: Path) -> None:
    state = {
        "served": Counter(),
        "requests": [],
        "hang": set(),
        "token": None,
        "faults_given": Counter(),
    }
    scripts: dict[str, _Script] = {}
    lock = threading.Lock()
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(body=False)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/__stats":
                with lock:
                    data = json.dumps(
                        state, default=lambda v: sorted(v) if isinstance(v, set) else v
                    )
                return self._send(200, data.encode(), "application/json")
            self._answer(body=True)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            payload = self.rfile.read(length)
            with lock:
                if self.path == "/__config":
                    config = json.loads(payload)
                    state["hang"], state["token"] = set(config["hang"]), config["token"]
                    scripts.clear()
                    scripts.update({p: _Script(s) for p, s in config["faults"].items()})
                elif self.path == "/__reset":
                    state["served"].clear()
                    state["requests"].clear()
            self._send(200, b"", "text/plain")

        def _answer(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            header = self.headers.get("Range")
            with lock:
                state["requests"].append((self.command, path, header))
                hang, token = path in state["hang"], state["token"]
                fault = scripts[path].next(bool(header)) if path in scripts else None
                if fault is not None:
                    state["faults_given"][path] += 1
            if hang or (fault is not None and fault.kind == "stall"):
                stop.wait(120)
                return
            if fault is not None and fault.kind == "status":
                self.send_response(fault.code)
                if fault.retry_after is not None:
                    self.send_header("Retry-After", str(fault.retry_after))
                self.send_header("Content-Length", "0")
                return self.end_headers()
            if token and self.headers.get("Authorization") != f"Bearer {token}":
                return self._status(401)
            if path == "/wms" and (root / "wms.tif").is_file():
                return self._send(200, _get_map(root / "wms.tif", self.path), "image/png")
            file = root / path.lstrip("/")
            if not path.strip("/") or not file.is_file() or ".." in path:
                return self._status(404)
            data = file.read_bytes()
            start, end, status = 0, len(data), 200
            if header:
                match = _RANGE.match(header.strip())
                if not match:
                    return self._status(416, len(data))
                first, last = match.groups()
                if first:
                    start = int(first)
                    end = min(len(data), int(last) + 1) if last else len(data)
                else:  # the last N bytes
                    start = max(0, len(data) - int(last))
                if start >= len(data):
                    return self._status(416, len(data))
                status = 206
            kind = fault.kind if fault is not None else None
            if kind == "short206" and status == 206 and end - start > 1:
                end = start + (end - start) // 2
            chunk = data[start:end]
            self.send_response(status)
            self.send_header("Content-Type", _CONTENT_TYPES.get(file.suffix, "text/html"))
            self.send_header("Accept-Ranges", "bytes")
            stat = file.stat()  # validators as static servers give them: size and time
            self.send_header("ETag", f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"')
            self.send_header("Last-Modified", formatdate(stat.st_mtime, usegmt=True))
            self.send_header("Content-Length", str(len(chunk)))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            if kind in ("reset", "short"):
                self._cut(chunk[: len(chunk) // 2], reset=kind == "reset")
            elif kind == "trickle":
                self._trickle(chunk)
            else:
                self.wfile.write(chunk)
            with lock:
                state["served"][path] += len(chunk)

        def _cut(self, part: bytes, reset: bool) -> None:
            """Send ``part`` of a body, then end the connection: an RST, or a plain close."""
            self.wfile.write(part)
            self.wfile.flush()
            if reset:  # linger 0: close() sends RST instead of FIN
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            self.close_connection = True
            self.connection.close()

        def _trickle(self, chunk: bytes) -> None:
            for i in range(len(chunk)):
                if stop.wait(1.0):
                    return
                try:
                    self.wfile.write(chunk[i : i + 1])
                    self.wfile.flush()
                except OSError:  # the client gave up
                    return

        def _send(self, code: int, data: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, size: int | None = None) -> None:
            self.send_response(code)
            if size is not None:
                self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))

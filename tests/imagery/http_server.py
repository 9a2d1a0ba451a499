"""A real HTTP server on loopback for the remote-raster tests: byte ranges, counted bytes, and the
misbehaviours a network has (a missing file, a hanging answer, a refusal without credentials).

It runs in a child process (``python http_server.py FOLDER``), not a thread of the tests: GDAL
makes some of its requests while holding Python's GIL, which a server thread of the same process
would need to answer them. The tests talk to it over HTTP: ``/__stats`` gives the bytes served and
the requests seen, ``/__config`` sets the paths that hang and the token required.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_CONTENT_TYPES = {".json": "application/json", ".tif": "image/tiff", ".html": "text/html"}


class RangeServer:
    """Serves the files of a folder at ``http://127.0.0.1:PORT/``, honouring single
    ``Range: bytes=a-b`` requests as static servers and object stores do (206, ``Content-Range``,
    416 past the end).

    :attr:`served` counts the body bytes sent for each path and :attr:`requests` lists every
    (method, path, Range header). ``hang`` paths wait (until the server stops) before answering;
    with ``token`` set every path needs ``Authorization: Bearer <token>`` (else 401).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.hang: set[str] = set()
        self.token: str | None = None
        self._process: subprocess.Popen | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def add(self, path: str, data: bytes | Path) -> str:
        """Serve ``data`` (bytes or a file's content) at ``/path``; its URL."""
        target = self.root / path.lstrip("/")
        target.write_bytes(data.read_bytes() if isinstance(data, Path) else bytes(data))
        return self.url(path)

    def configure(self) -> None:
        """Send :attr:`hang` and :attr:`token` to the server."""
        body = json.dumps({"hang": sorted(self.hang), "token": self.token}).encode()
        urllib.request.urlopen(urllib.request.Request(self.url("__config"), body), timeout=10)

    def _stats(self) -> dict:
        with urllib.request.urlopen(self.url("__stats"), timeout=10) as answer:
            return json.loads(answer.read())

    @property
    def served(self) -> Counter[str]:
        return Counter(self._stats()["served"])

    @property
    def requests(self) -> list[tuple[str, str, str | None]]:
        return [tuple(r) for r in self._stats()["requests"]]

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


def _serve(root: Path) -> None:
    state = {"served": Counter(), "requests": [], "hang": set(), "token": None}
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
            if hang:
                stop.wait(120)
                return
            if token and self.headers.get("Authorization") != f"Bearer {token}":
                return self._status(401)
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
            chunk = data[start:end]
            self.send_response(status)
            self.send_header("Content-Type", _CONTENT_TYPES.get(file.suffix, "text/html"))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(chunk)))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
            self.end_headers()
            if body:
                self.wfile.write(chunk)
                with lock:
                    state["served"][path] += len(chunk)

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

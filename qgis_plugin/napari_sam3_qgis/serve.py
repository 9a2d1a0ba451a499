"""The warm engine: ``python worker.py --serve``, one long-lived process holding the model.

Run in napari-sam3's Python (QGIS never imports napari_sam3, see worker.py). Framing: JSON
lines; requests on stdin, events on stdout, whatever the libraries print on stderr.

Request: ``{"v": 2, "id": N, "action": NAME, "params": {...}}``. Events name the request:
``{"v": 2, "id": N, "event": E, ...}`` with E one of ``progress`` (``fraction``, ``message``),
``info`` / ``warning`` (``message``), ``result`` (``result``), ``error`` (``kind``: ``refused``
or ``failed``, ``message``), ``cancelled``. One request runs at a time, on a thread of its own,
while this one reads stdin: another request meanwhile is refused ("busy"), except ``cancel``
(``{"target": N}``: that job stops between tiles and ends with ``cancelled``; cancel itself
gets no answer) and ``shutdown``. Stdin closing is a shutdown; the exit code is then 0.

Actions (coordinates in the raster's CRS, polygons as WKT in it; see
napari_sam3.scene.canvas): ``hello``, ``connect`` (``connection``: ConnectionSpec fields; the
model loads once per spec), ``open`` (``raster``, ``bands``), ``click`` (``image``, ``points``,
``box``, ``previous``; the best candidate's polygon, the others listed), ``candidate``
(``token``, ``index``: a listed candidate's polygon; v2), ``segment`` (``image``, ``keywords``: a list, or the text as typed,
split by the library's parse_keywords; ``exemplars``, ``extent``,
``gsd``, ``score_thr``, ``dedup``), ``cancel``, ``shutdown``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
import warnings
from typing import Any

from worker import Cancelled, _connection, claim_stdout, import_message

PROTOCOL = 2
CONTROL = ("cancel", "shutdown")


class Server:
    def __init__(self, out) -> None:
        self._out = out
        self._write = threading.Lock()
        self._job: tuple[int, threading.Event, threading.Thread] | None = None
        self._idle = threading.Event()
        self._idle.set()
        self.spec = None
        self.client = None
        self.canvas = None
        self.loads = 0  # models loaded by this process (connect with a new spec)

    # -- events --------------------------------------------------------------------------------
    def emit(self, ident: Any, event: str, **fields: Any) -> None:
        line = json.dumps({"v": PROTOCOL, "id": ident, "event": event, **fields}, default=str)
        with self._write:
            self._out.write(line + "\n")

    def refuse(self, ident: Any, message: str) -> None:
        self.emit(ident, "error", kind="refused", message=message)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, lines) -> int:
        for line in lines:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("not an object")
            except ValueError:
                self.refuse(None, f"not a request (one JSON object per line): {line[:200]!r}")
                continue
            ident = request.get("id")
            if request.get("v") != PROTOCOL:
                self.refuse(
                    ident,
                    f"protocol v{request.get('v')} asked, this worker speaks v{PROTOCOL}: update "
                    "the napari-sam3 QGIS plugin and napari-sam3 to the same release "
                    "(scripts/install_qgis_plugin.sh)",
                )
                continue
            action = request.get("action")
            params = request.get("params") or {}
            if action == "cancel":
                self._cancel(params.get("target"))
            elif action == "shutdown":
                self._stop()
                self.emit(ident, "result", result={})
                return 0
            elif action not in ACTIONS:
                self.refuse(
                    ident,
                    f"unknown action {action!r}: one of {', '.join(ACTIONS)}, "
                    + ", ".join(CONTROL),
                )
            elif self._busy():
                self.refuse(
                    ident,
                    f"busy: request {self._job[0]} is running; wait for it, or cancel it first",
                )
            else:
                self._start(ident, action, params)
        self._stop()  # stdin closed: QGIS is gone or asked us to end
        return 0

    def _busy(self) -> bool:
        return not self._idle.is_set()

    def _cancel(self, target: Any) -> None:
        if self._job is not None and self._job[0] == target:
            self._job[1].set()

    def _stop(self) -> None:
        if self._job is not None:
            self._job[1].set()
            self._job[2].join()
        if self.client is not None:
            self.client.close()

    def _start(self, ident: Any, action: str, params: dict) -> None:
        cancel = threading.Event()
        thread = threading.Thread(
            target=self._run_job, args=(ident, action, params, cancel), daemon=True
        )
        self._job = (ident, cancel, thread)
        self._idle.clear()
        thread.start()

    def _run_job(self, ident: Any, action: str, params: dict, cancel: threading.Event) -> None:
        job = Job(self, ident, cancel)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                job.check()
                result = ACTIONS[action](self, params, job)
            for text in dict.fromkeys(str(w.message) for w in caught if w.category is UserWarning):
                self.emit(ident, "warning", message=text)
            last = {"event": "result", "result": result}
        except Cancelled:
            last = {"event": "cancelled"}
        except Exception as error:
            last = {"event": "error", "kind": _kind(error), "message": _message(error)}
        self._idle.set()  # before the answer: the next request may follow it at once
        self.emit(ident, **last)


class Job:
    """What an action gets: its progress events and its cancel."""

    def __init__(self, server: Server, ident: Any, cancel: threading.Event) -> None:
        self.server, self.ident, self.cancel = server, ident, cancel

    def say(self, event: str, message: str) -> None:
        self.server.emit(self.ident, event, message=message)

    def check(self, where: str = "") -> None:
        if self.cancel.is_set():
            raise Cancelled(where)

    def tiles(self, done: int, total: int) -> None:
        """segment_scene's progress: reports, then stops here if cancelled (between tiles)."""
        self.server.emit(
            self.ident,
            "progress",
            fraction=done / max(1, total),
            message=f"tile {done} of {total}",
        )
        self.check(f"after tile {done} of {total}")


def _kind(error: Exception) -> str:
    from napari_sam3.core.errors import RefusedError, Sam3Error

    if isinstance(error, RefusedError):
        return "refused"
    if isinstance(error, ValueError | TypeError | KeyError) and not isinstance(error, Sam3Error):
        return "refused"  # the arguments of a request (a ConnectionSpec's own checks)
    return "failed"


def _message(error: Exception) -> str:
    from napari_sam3.core.errors import Sam3Error

    if isinstance(error, Sam3Error | ValueError | TypeError | OSError | ConnectionError):
        return str(error)
    traceback.print_exc()  # a bug: the traceback for the stderr tail
    return f"{type(error).__name__}: {error}"


# -- actions -----------------------------------------------------------------------------------
def hello(server: Server, params: dict, job: Job) -> dict:
    import napari_sam3

    return {
        "protocol": PROTOCOL,
        "library": napari_sam3.__version__,
        "pid": os.getpid(),
        "loads": server.loads,
    }


def connect(server: Server, params: dict, job: Job) -> dict:
    from napari_sam3.scene.canvas import Canvas

    spec = _connection({"connection": params.get("connection") or {}})
    if spec != server.spec or server.client is None:
        job.say("info", f"loading the model at {spec.where}")
        try:
            client = spec.connect()
        except Exception as error:
            raise ConnectionError(f"cannot use the model at {spec.where}: {error}") from error
        if server.client is not None:
            server.client.close()
        server.spec, server.client, server.canvas = spec, client, Canvas(client)
        server.loads += 1
        if client.manifest.random_weights:
            job.say(
                "warning",
                "RANDOM WEIGHTS: this model was never trained, its masks are meaningless "
                "(export your SAM3 checkpoint with sam3-export for real results)",
            )
    client = server.client
    return {
        "runtime": client.engine.runtime_summary(),
        "model": client.model_id,
        "repr": repr(client),
        "loads": server.loads,
    }


def _need(params: dict, name: str) -> Any:
    if params.get(name) is None:
        from napari_sam3.core.errors import InvalidInput

        raise InvalidInput(f"the request lacks its parameter {name!r}")
    return params[name]


def _canvas(server: Server):
    if server.canvas is None:
        from napari_sam3.core.errors import InvalidState

        raise InvalidState("no model yet: connect first (the dock's connection line)")
    return server.canvas


def open_raster(server: Server, params: dict, job: Job) -> dict:
    opened = _canvas(server).open(_need(params, "raster"), params.get("bands"))
    return opened.describe()


def click(server: Server, params: dict, job: Job) -> dict:
    return _canvas(server).click(
        _need(params, "image"),
        params.get("points") or (),
        params.get("box"),
        params.get("previous"),
    )


def candidate(server: Server, params: dict, job: Job) -> dict:
    return _canvas(server).candidate(_need(params, "token"), _need(params, "index"))


def segment(server: Server, params: dict, job: Job) -> dict:
    keywords = params.get("keywords")
    if isinstance(keywords, str):  # as typed ("building, pool"): the library's one rule splits it
        from napari_sam3.prompts.keywords import parse_keywords

        keywords = parse_keywords(keywords)
    return _canvas(server).segment(
        _need(params, "image"),
        keywords=keywords,
        exemplars=params.get("exemplars"),
        extent=params.get("extent"),
        gsd=params.get("gsd"),
        score_thr=params.get("score_thr"),
        dedup=params.get("dedup"),
        progress=job.tiles,
    )


ACTIONS = {
    "hello": hello,
    "connect": connect,
    "open": open_raster,
    "click": click,
    "candidate": candidate,
    "segment": segment,
}


def serve() -> int:
    out = claim_stdout()
    try:
        import napari_sam3  # noqa: F401
    except ImportError as error:
        line = {"v": PROTOCOL, "id": None, "event": "error", "kind": "refused"}
        out.write(json.dumps({**line, "message": import_message(error)}) + "\n")
        return 2
    return Server(out).run(sys.stdin)

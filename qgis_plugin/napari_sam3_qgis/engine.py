"""The warm SAM3 engine of a QGIS session: one ``worker.py --serve`` process holding the model.

The worker runs in napari-sam3's own Python (``runner.python()``, QGIS's environment less
``runner.QGIS_ONLY``); the protocol is in serve.py's docstring. Use:

    engine = shared()                       # the one engine of this QGIS session
    engine.request("connect", {"connection": {"repository": "..."}})
    image = engine.request("open", {"raster": path, "bands": None})["image"]
    answer = engine.request("click", {"image": image, "points": [[x, y, 1]]})

Requests run one at a time (a second waits for the first; the worker would refuse it as busy).
``request`` blocks its thread until the answer; it raises :class:`EngineRefused` (the worker
refused the request: its message says what to change), :class:`EngineFailed` or
:class:`EngineCancelled` (all :class:`EngineError`, a QgsProcessingException). A worker that
dies during a request is started again once (connect and open replayed; the model loads again)
and the request sent again, with a warning through ``messages``; a second death is an error with
the tail of its stderr.

From QGIS's GUI thread use ``request_async``: it returns a :class:`Pending` at once, whose
request runs on a thread of its own. ``pending.signals`` (a QObject living in the thread that
made it) emits ``progress(float, str)``, ``message(str, str)`` (kind, text) and ``finished()``
in that thread's event loop; ``pending.done``, ``pending.result()`` (the answer, or the error
raised), ``pending.cancel()`` and ``pending.wait(timeout)`` (processes Qt events meanwhile).
The plugin's unload and ``QgsApplication.aboutToQuit`` stop the shared engine.
"""

from __future__ import annotations

import collections
import itertools
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from qgis.core import QgsProcessingException

from . import runner

PROTOCOL = 2
STDERR_LINES = 40  # the stderr tail kept for error messages
STOP_WAIT_S = 10.0
# actions whose state a restarted worker needs again (sent again, in order, after a restart)
REPLAYED = ("connect", "open")


class EngineError(QgsProcessingException):
    kind = "failed"


class EngineRefused(EngineError):
    kind = "refused"


class EngineFailed(EngineError):
    kind = "failed"


class EngineCancelled(EngineError):
    kind = "cancelled"


class _Died(Exception):
    """The worker process ended during a request."""


class Engine:
    """One worker process, started on the first request; requests one at a time."""

    def __init__(self, command: list[str] | None = None, env: dict[str, str] | None = None):
        self._command = command
        self._env = env
        self._process: subprocess.Popen | None = None
        self._events: dict[Any, queue.Queue] = {}
        self._stderr: collections.deque = collections.deque(maxlen=STDERR_LINES)
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._request_lock = threading.Lock()
        self._current: Any = None
        self._replay: dict[str, dict] = {}  # connect, and open by raster: what a restart resends
        self.restarts = 0

    # -- the process ---------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        worker = str(runner.WORKER)
        return self._command or [runner.python(), "-P", worker, "--serve"]

    def start(self) -> None:
        if self.running:
            return
        self._stderr.clear()
        try:
            command = self.command()
        except QgsProcessingException as error:  # no napari-sam3 Python: what to install
            raise EngineRefused(str(error)) from None
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=self._env or runner.worker_env(),
            creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0),
        )
        self._process = process
        threading.Thread(target=self._read_events, args=(process,), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(process,), daemon=True).start()

    def _read_events(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self._stderr.append(line.rstrip())
                continue
            target = self._events.get(event.get("id")) if isinstance(event, dict) else None
            if target is None and isinstance(event, dict) and event.get("id") is None:
                target = self._events.get(self._current)  # said before any request was read
            if target is not None:
                target.put(event)
        process.wait()
        for target in list(self._events.values()):
            target.put(None)  # the process is gone

    def _read_stderr(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            self._stderr.append(line.rstrip())

    def stderr_tail(self, lines: int = 8) -> str:
        return "\n".join(list(self._stderr)[-lines:])

    def _send(self, message: dict) -> None:
        with self._send_lock:
            try:
                self._process.stdin.write(json.dumps(message) + "\n")
                self._process.stdin.flush()
            except (OSError, ValueError, AttributeError):
                pass  # it has ended: the reader says so

    def stop(self) -> None:
        """Shut the worker down (stdin closed; killed if it does not end in time)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def cancel(self) -> None:
        """Cancel the request in progress (it ends with EngineCancelled between tiles)."""
        if self._current is not None and self.running:
            self._send({"v": PROTOCOL, "id": next(self._ids), "action": "cancel",
                        "params": {"target": self._current}})  # fmt: skip

    # -- requests ------------------------------------------------------------------------------
    def request(
        self,
        action: str,
        params: dict | None = None,
        progress: Callable[[float, str], None] | None = None,
        is_cancelled: Callable[[], bool] | None = None,
        timeout: float | None = None,
        messages: Callable[[str, str], None] | None = None,
    ) -> dict:
        """Send one request and wait for its answer (see the module's docstring)."""
        params = dict(params or {})
        with self._request_lock:
            try:
                return self._exchange(action, params, progress, is_cancelled, timeout, messages)
            except _Died as first:
                code = first.args[0]
            self.restarts += 1
            _say(
                messages,
                "warning",
                f"the SAM3 engine stopped (exit {code}); restarted it, the model loads again",
            )
            try:
                for step, replayed in list(self._replay.items()):
                    if (step[0], replayed) != (action, params):
                        self._exchange(step[0], replayed, None, is_cancelled, timeout, messages)
                params.pop("previous", None)  # its object was in the process that died
                return self._exchange(action, params, progress, is_cancelled, timeout, messages)
            except _Died as second:
                raise EngineFailed(
                    f"the SAM3 engine stopped again (exit {second.args[0]}) after a restart: "
                    f"{self.stderr_tail() or 'it said nothing on stderr'}"
                ) from None

    def _exchange(self, action, params, progress, is_cancelled, timeout, messages) -> dict:
        if self._process is not None and self._process.poll() is not None:
            code, self._process = self._process.returncode, None
            raise _Died(code)  # it ended since the last request (killed, crashed)
        self.start()
        ident = next(self._ids)
        events: queue.Queue = queue.Queue()
        self._events[ident] = events
        self._current = ident
        process = self._process
        deadline = None if timeout is None else time.monotonic() + timeout
        cancelled = False
        try:
            self._send({"v": PROTOCOL, "id": ident, "action": action, "params": params})
            while True:
                if is_cancelled is not None and not cancelled and is_cancelled():
                    cancelled = True
                    self.cancel()
                if deadline is not None and time.monotonic() > deadline:
                    self.cancel()
                    raise EngineFailed(
                        f"the SAM3 engine did not answer {action} within {timeout:g} s"
                    )
                try:
                    event = events.get(timeout=0.1)
                except queue.Empty:
                    if process.poll() is None:
                        continue
                    event = None
                if event is None:
                    if self._process is process:
                        self._process = None
                    raise _Died(process.wait())
                kind = event.get("event")
                if kind == "result":
                    self._remember(action, params)
                    return event.get("result") or {}
                if kind == "error":
                    error = EngineRefused if event.get("kind") == "refused" else EngineFailed
                    raise error(event.get("message") or f"{action} failed")
                if kind == "cancelled":
                    raise EngineCancelled(f"{action} cancelled")
                if kind == "progress" and progress is not None:
                    progress(float(event.get("fraction", 0.0)), event.get("message", ""))
                elif kind in ("info", "warning"):
                    _say(messages, kind, event.get("message", ""))
        finally:
            self._events.pop(ident, None)
            self._current = None

    def _remember(self, action: str, params: dict) -> None:
        if action == "connect":
            self._replay = {("connect", ""): params}  # a new model: the rasters open again too
        elif action == "open":
            self._replay[("open", json.dumps(params, sort_keys=True))] = params

    def request_async(self, action: str, params: dict | None = None, timeout=None) -> Pending:
        """The request on a thread of its own: a :class:`Pending` at once."""
        pending = Pending(self)
        pending._thread = threading.Thread(
            target=pending._run, args=(action, params, timeout), daemon=True
        )
        pending._thread.start()
        return pending


def _say(messages: Callable[[str, str], None] | None, kind: str, text: str) -> None:
    if messages is not None and text:
        messages(kind, text)


def _signals():
    from qgis.PyQt.QtCore import QObject, pyqtSignal

    class Signals(QObject):
        progress = pyqtSignal(float, str)
        message = pyqtSignal(str, str)
        finished = pyqtSignal()

    return Signals()


class Pending:
    """A request running on its own thread (``Engine.request_async``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.signals = _signals()
        self.progress = 0.0
        self.messages: list[tuple[str, str]] = []
        self._cancelled = threading.Event()
        self._finished = threading.Event()
        self._emitted = threading.Event()
        self._result: dict | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _run(self, action: str, params: dict | None, timeout: float | None) -> None:
        def progress(fraction: float, text: str) -> None:
            self.progress = fraction
            self.signals.progress.emit(fraction, text)

        def message(kind: str, text: str) -> None:
            self.messages.append((kind, text))
            self.signals.message.emit(kind, text)

        try:
            self._result = self.engine.request(
                action, params, progress, self._cancelled.is_set, timeout, message
            )
        except BaseException as error:  # handed to whoever asks for the result
            self._error = error
        finally:
            self._finished.set()
            self.signals.finished.emit()
            self._emitted.set()  # the signal is posted: wait()'s last processEvents delivers it

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def cancel(self) -> None:
        self._cancelled.set()

    def result(self, timeout: float | None = None) -> dict:
        """The answer (waiting up to `timeout` seconds), or the request's error raised."""
        if not self._finished.wait(timeout):
            raise EngineFailed("the SAM3 engine has not answered yet")
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self, timeout: float | None = None) -> bool:
        """Wait, processing Qt events (the GUI stays alive); True when done."""
        from qgis.PyQt.QtCore import QCoreApplication

        end = None if timeout is None else time.monotonic() + timeout
        while not self._emitted.wait(0.02):
            QCoreApplication.processEvents()
            if end is not None and time.monotonic() > end:
                return False
        QCoreApplication.processEvents()
        return True


_SHARED: Engine | None = None


def shared() -> Engine:
    """The one engine of this QGIS session, stopped when QGIS quits."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Engine()
        from qgis.core import QgsApplication

        app = QgsApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(stop_shared)
    return _SHARED


def stop_shared() -> None:
    global _SHARED
    engine, _SHARED = _SHARED, None
    if engine is not None:
        engine.stop()


__all__ = [
    "Engine",
    "EngineCancelled",
    "EngineError",
    "EngineFailed",
    "EngineRefused",
    "Pending",
    "shared",
    "stop_shared",
]

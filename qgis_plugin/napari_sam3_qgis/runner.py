"""Running a job in napari-sam3's own Python, with QGIS's feedback: progress, messages, cancel.

Which Python: the provider's setting (Processing options > Providers > napari-sam3), else the
environment variable NAPARI_SAM3_PYTHON, else the environment ``install_qgis_plugin.sh`` makes.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from qgis.core import QgsProcessingException, QgsSettings

SETTING = "NAPARI_SAM3_PYTHON"
SETTING_KEY = f"Processing/Configuration/{SETTING}"
WORKER = Path(__file__).with_name("worker.py")
# after a cancel, the worker stops at its next tile; one that does not within this is killed
CANCEL_GRACE_S = 10.0
EXIT_CANCELLED = 3
# QGIS's environment, not the worker's: QGIS's Python modules, and (OSGeo4W, QGIS.app) QGIS's
# own GDAL and PROJ data, which break the library's wheels (an older proj.db: "DATABASE.LAYOUT.
# VERSION.MINOR = 2 whereas a number >= 6 is expected"); they carry their own.
QGIS_ONLY = ("PYTHONPATH", "PYTHONHOME", "GDAL_DATA", "GDAL_DRIVER_PATH", "PROJ_LIB", "PROJ_DATA")


# The model line the dock and the Processing algorithms share: a repository folder or Triton
# server(s) host:port[,...]; the dock shows it, the algorithms take it as MODELS's or SERVER's
# default, and whichever was used last sets it.
CONNECTION_KEY = "napari-sam3/connection"


def remembered_connection() -> str:
    return str(QgsSettings().value(CONNECTION_KEY, "") or "").strip()


def remember_connection(text: str) -> None:
    if text and text.strip():
        QgsSettings().setValue(CONNECTION_KEY, text.strip())


def default_python() -> Path:
    """Where install_qgis_plugin.sh puts the napari-sam3 environment."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
        return base / "napari-sam3" / "qgis-env" / "Scripts" / "python.exe"
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data / "napari-sam3" / "qgis-env" / "bin" / "python"


def python() -> str:
    """The interpreter that has napari_sam3, or an error saying how to get one."""
    configured = str(QgsSettings().value(SETTING_KEY, "") or "").strip()
    chosen = configured or os.environ.get(SETTING, "").strip() or str(default_python())
    if not Path(chosen).is_file():
        raise QgsProcessingException(
            f"napari-sam3's Python was not found at {chosen}. Install it with "
            "scripts/install_qgis_plugin.sh (Debian), or see docs/qgis.md (Windows, macOS) and "
            "set 'Python with napari-sam3' in Settings > Options > Processing > Providers > "
            "napari-sam3 (or the NAPARI_SAM3_PYTHON environment variable)"
        )
    return chosen


def worker_env() -> dict[str, str]:
    """The worker's environment: QGIS's own, less what is QGIS's alone."""
    env = {k: v for k, v in os.environ.items() if k not in QGIS_ONLY}
    env.update(PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8")
    return env


class Job:
    """A temporary folder for one run's files; removed afterwards with whatever is in it."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="napari-sam3-qgis-")
        self.dir = Path(self._dir.name)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self._dir.cleanup()

    def run(self, job: dict, feedback) -> dict:
        """Run `job` in the worker; returns its result event. Progress and messages go to
        `feedback`; a cancel there stops the worker at its next tile; a failure is a
        QgsProcessingException with the library's message."""
        spec = self.dir / "job.json"
        spec.write_text(json.dumps(job), encoding="utf-8")
        log = (self.dir / "worker.log").open("w+", encoding="utf-8")
        flags = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        env = worker_env()
        command = [python(), "-P", str(WORKER), str(spec)]  # -P: no plugin folder on its path
        if feedback is not None:
            feedback.pushDebugInfo("napari-sam3 runs: " + " ".join(command))
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            encoding="utf-8",
            env=env,
            creationflags=flags,
        )
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        result, error, cancelled_at, stopped = None, None, None, ""
        try:
            while True:
                if feedback is not None and feedback.isCanceled() and cancelled_at is None:
                    cancelled_at = time.monotonic()
                    _send(process, "cancel\n")
                if cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_GRACE_S:
                    process.kill()
                try:
                    line = lines.get(timeout=0.1)
                except queue.Empty:
                    continue
                if line is None:
                    break
                event = _parse(line)
                if event is None:
                    _say(feedback, "info", line.rstrip())
                elif event["event"] == "result":
                    result = event
                elif event["event"] == "error":
                    error = event["message"]
                elif event["event"] == "cancelled":
                    stopped = event.get("where") or ""
                else:
                    _show(feedback, event)
        finally:
            if process.poll() is None:
                _send(process, "cancel\n")
                try:
                    process.wait(CANCEL_GRACE_S)
                except subprocess.TimeoutExpired:
                    process.kill()
            code = process.wait()
            for stream in (process.stdin, process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            log.seek(0)
            details = log.read()
            log.close()
        if details.strip() and feedback is not None:
            feedback.pushDebugInfo(details.rstrip())
        if cancelled_at is not None or code == EXIT_CANCELLED:
            where = f" ({stopped})" if stopped else ""
            raise QgsProcessingException(
                f"Cancelled{where}: nothing was written for the raster in progress"
            )
        if error is not None:  # the job's own files are named by their layers, not this folder
            raise QgsProcessingException(error.replace(f"{self.dir}{os.sep}", ""))
        if code != 0 or result is None:
            tail = "\n".join(details.strip().splitlines()[-5:])
            raise QgsProcessingException(
                f"napari-sam3's worker stopped (exit code {code}) without a result: {tail}"
            )
        return result


def _send(process: subprocess.Popen, text: str) -> None:
    try:
        process.stdin.write(text)
        process.stdin.flush()
    except (OSError, ValueError):
        pass  # it has ended already


def _parse(line: str) -> dict | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


def _say(feedback, kind: str, text: str) -> None:
    if feedback is None or not text:
        return
    if kind == "warning":
        feedback.pushWarning(text)
    else:
        feedback.pushInfo(text)


def _show(feedback, event: dict) -> None:
    if feedback is None:
        return
    kind = event["event"]
    if kind == "progress":
        fraction = event.get("fraction", event["done"] / max(1, event["total"]))
        feedback.setProgress(100.0 * fraction)
        feedback.setProgressText(f"{event['scene']}: tile {event['done']} of {event['total']}")
    elif kind == "scene":
        feedback.pushInfo(f"rasters done: {event['done']} of {event['total']}")
    elif kind in ("info", "warning"):
        _say(feedback, "warning" if kind == "warning" else "info", event.get("message", ""))

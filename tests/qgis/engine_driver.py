"""Drives the warm engine (engine.py) in a standalone QgsApplication, as the dock does.

Started by tests/qgis/test_engine.py with QGIS's own Python, never collected by pytest:
``python3 engine_driver.py PROFILE_DIR REPOSITORY RASTER PLAN.json``. The plugin is loaded from
the profile install_qgis_plugin.sh wrote (its recorded napari-sam3 Python runs the worker).
PLAN.json holds the map coordinates to click and the extent to segment. Prints one JSON object:
what each step answered, the worker's pids, the messages and the progress seen.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from qgis_start import start_qgis


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped by its parent) counts as gone
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split()[2] != "Z"


def main(profile: str, repository: str, raster: str, plan_file: str) -> int:
    app = start_qgis(profile)
    sys.path.insert(0, str(Path(profile) / "python" / "plugins"))
    import napari_sam3_qgis
    from napari_sam3_qgis import engine as engines

    plan = json.loads(Path(plan_file).read_text())
    plugin = napari_sam3_qgis.classFactory(None)
    plugin.initProcessing()
    out: dict = {"messages": []}

    def said(kind: str, text: str) -> None:
        out["messages"].append([kind, text])

    engine = engines.shared()
    out["same_shared"] = engines.shared() is engine
    out["hello"] = engine.request("hello")
    connection = {"repository": repository, "precision": "fp32"}
    out["connect"] = engine.request("connect", {"connection": connection}, messages=said)
    out["connect_again"] = engine.request("connect", {"connection": connection})
    out["pid_after_connect"] = engine.pid
    image = engine.request("open", {"raster": raster, "bands": None})
    out["open"] = image
    click = {"image": image["image"], "points": [plan["point"]], "box": None, "previous": None}
    out["click"] = engine.request("click", click)
    token = out["click"]["token"]
    out["others"] = [
        engine.request("candidate", {"token": token, "index": c["index"]})
        for c in out["click"]["candidates"][1:]
    ]
    out["no_such_candidate"] = _error(engine, "candidate", {"token": token, "index": 7})
    out["outside"] = _error(engine, "click", {**click, "points": [plan["outside"]]})
    out["segment"] = engine.request(
        "segment", {"image": image["image"], "keywords": ["building"], "extent": plan["extent"],
                    "gsd": None, "score_thr": 0.0, "dedup": None},
    )  # fmt: skip
    out["pid_after_work"] = engine.pid
    out["loads_after_work"] = engine.request("hello")["loads"]

    # cancelled from the GUI thread through request_async, once the first tile is reported
    pending = engine.request_async(
        "segment", {"image": image["image"], "keywords": ["building"], "score_thr": 0.0}
    )
    progress: list[float] = []

    def moved(fraction: float, _text: str) -> None:
        progress.append(fraction)
        pending.cancel()

    pending.signals.progress.connect(moved)
    finished: list[bool] = []
    pending.signals.finished.connect(lambda: finished.append(True))
    out["cancel_waited"] = pending.wait(300)
    out["cancel_progress"] = progress
    out["cancel_finished_signal"] = finished
    out["cancelled"] = _outcome(pending)
    out["after_cancel"] = len(engine.request("click", click)["candidates"])

    # killed between requests: the next request restarts it once and says so
    first = engine.pid
    os.kill(first, signal.SIGKILL)
    out["restarted_click"] = engine.request("click", {**click, "previous": "gone:1"}, messages=said)
    out["restarted_pid_differs"] = engine.pid not in (None, first)
    out["old_pid_alive"] = _alive(first)
    out["loads_after_restart"] = engine.request("hello")["loads"]

    # killed again while it restarts: the request fails, naming what happened
    os.kill(engine.pid, signal.SIGKILL)

    def kill_again(kind: str, text: str) -> None:
        said(kind, text)
        if text.startswith("loading the model"):  # said by the restarted worker
            os.kill(engine.pid, signal.SIGKILL)

    out["twice"] = _error(engine, "click", click, messages=kill_again)

    # a new worker for the next request; unloading the plugin stops it, closing its stdin
    out["hello_after"] = engine.request("hello")
    last = engine.pid
    plugin.unload()
    deadline = time.monotonic() + 20
    while _alive(last) and time.monotonic() < deadline:
        time.sleep(0.05)
    out["alive_after_unload"] = _alive(last)
    out["shared_after_unload"] = engines._SHARED is not None
    print(json.dumps(out), flush=True)
    app.exitQgis()
    return 0


def _error(engine, action: str, params: dict, **options) -> dict:
    from napari_sam3_qgis.engine import EngineError

    try:
        engine.request(action, params, **options)
    except EngineError as error:
        return {"class": type(error).__name__, "kind": error.kind, "message": str(error)}
    return {"class": None}


def _outcome(pending) -> dict:
    from napari_sam3_qgis.engine import EngineError

    try:
        return {"result": pending.result(0)}
    except EngineError as error:
        return {"class": type(error).__name__, "message": str(error)}


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:5]))

"""The warm engine of the QGIS dock (issue 43): ``worker.py --serve`` and engine.py's client in
QGIS's own Python. Its answers are the library's (scene/canvas.py in this process) on the same
pixels; a killed worker is restarted once; the model loads once; nothing outlives the plugin."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import shapely

from napari_sam3.scene.canvas import Canvas

from .conftest import ROOT, WORKER_PYTHON, drive

DRIVER = Path(__file__).with_name("engine_driver.py")
WORKER = ROOT / "qgis_plugin" / "napari_sam3_qgis" / "worker.py"


@pytest.fixture(scope="module")
def plan(s2_tif) -> dict:
    import rasterio

    with rasterio.open(s2_tif) as ds:
        t, (west, _, _, north) = ds.transform, ds.bounds
    (x0, y0), (x1, y1) = t * (40, 150), t * (180, 30)
    return {
        "point": [*(t * (150.5, 120.5)), 1],
        "outside": [west - 100.0, north + 100.0, 1],
        "extent": [x0, y0, x1, y1],
    }


@pytest.fixture(scope="module")
def driven(qgis_env, profile, s2_tif, tiny_repository, plan, tmp_path_factory) -> dict:
    """One QGIS session through every step of engine_driver.py."""
    plan_file = tmp_path_factory.mktemp("engine") / "plan.json"
    plan_file.write_text(json.dumps(plan))
    return drive(DRIVER, [profile, tiny_repository, s2_tif, plan_file], qgis_env)[-1]


@pytest.fixture(scope="module")
def library(local_client, s2_tif) -> tuple[Canvas, str]:
    canvas = Canvas(local_client)
    return canvas, canvas.open(str(s2_tif)).key


def _geometries(rows: list[dict]) -> list:
    return [shapely.from_wkt(row["wkt"]) for row in rows]


def test_a_click_through_the_engine_is_the_library_click(driven, library, plan):
    canvas, key = library
    answer = canvas.click(key, [plan["point"]])
    expected = answer["candidates"][:1] + [
        canvas.candidate(answer["token"], c["index"]) for c in answer["candidates"][1:]
    ]
    listed = driven["click"]["candidates"]
    assert 2 <= len(listed) <= 3  # the others' polygons asked with `candidate` too
    assert [c["score"] for c in listed] == pytest.approx([c["score"] for c in expected])
    got = listed[:1] + driven["others"]
    assert all(a.equals(b) for a, b in zip(_geometries(got), _geometries(expected), strict=True))
    assert driven["no_such_candidate"]["kind"] == "refused"
    assert "0 is the best" in driven["no_such_candidate"]["message"]
    assert driven["outside"]["kind"] == "refused"
    assert "lies outside the raster" in driven["outside"]["message"]


def test_keywords_in_an_extent_through_the_engine_are_the_library_segment(driven, library, plan):
    canvas, key = library
    expected = canvas.segment(key, ["building"], extent=plan["extent"], score_thr=0.0)
    got = driven["segment"]
    assert got["count"] == expected["count"] > 0
    pairs = zip(_geometries(got["features"]), _geometries(expected["features"]), strict=True)
    assert all(a.equals(b) for a, b in pairs)


def test_the_model_loads_once_per_session(driven):
    assert driven["same_shared"]
    assert driven["hello"]["protocol"] == 2 and driven["hello"]["loads"] == 0
    assert driven["connect"]["loads"] == driven["connect_again"]["loads"] == 1
    assert driven["pid_after_connect"] == driven["pid_after_work"] == driven["hello"]["pid"]
    assert driven["loads_after_work"] == 1
    assert "fp32" in driven["connect"]["runtime"]
    assert ["warning", "RANDOM WEIGHTS"] in [[k, t[:14]] for k, t in driven["messages"]]


def test_a_cancel_stops_a_keyword_run_between_tiles(driven):
    assert driven["cancel_waited"] and driven["cancel_finished_signal"] == [True]
    assert driven["cancelled"]["class"] == "EngineCancelled"
    assert 1 <= len(driven["cancel_progress"]) < 15  # the 15 tiles did not all run
    assert driven["after_cancel"] >= 1  # and the engine answers the next request


def test_a_killed_worker_is_restarted_once_then_reported(driven):
    restarted = "the SAM3 engine stopped (exit -9); restarted it, the model loads again"
    assert ["warning", restarted] in driven["messages"]
    assert driven["restarted_click"]["candidates"]
    assert driven["restarted_pid_differs"] and not driven["old_pid_alive"]
    assert driven["loads_after_restart"] == 1  # the new process loaded it (once)
    assert driven["twice"]["class"] == "EngineFailed"
    assert "stopped again (exit -9) after a restart" in driven["twice"]["message"]
    assert driven["hello_after"]["protocol"] == 2


def test_unloading_the_plugin_stops_the_worker(driven):
    assert driven["alive_after_unload"] is False
    assert driven["shared_after_unload"] is False


# -- the protocol itself, spoken to the worker directly -------------------------------------------
def _serve(tmp_path) -> subprocess.Popen:
    return subprocess.Popen(
        [WORKER_PYTHON, "-P", str(WORKER), "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr.txt").open("w"),
        text=True,
    )


def _ask(process, ident, action, params=None, v=2) -> None:
    request = {"v": v, "id": ident, "action": action, "params": params or {}}
    process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()


def _until(process, ident, final=("result", "error", "cancelled")) -> list[dict]:
    events = []
    for line in process.stdout:
        event = json.loads(line)
        assert event["v"] == 2
        events.append(event)
        if event["id"] == ident and event["event"] in final:
            return events
    raise AssertionError(f"the worker ended before answering {ident}: {events}")


def test_the_protocol_refuses_other_versions_and_a_second_job(tmp_path, tiny_repository, s2_tif):
    process = _serve(tmp_path)
    try:
        _ask(process, 1, "hello", v=1)
        (event,) = _until(process, 1)
        assert event["event"] == "error" and event["kind"] == "refused"
        assert event["message"].startswith("protocol v1 asked, this worker speaks v2: update")
        _ask(process, 2, "nonsense")
        assert "unknown action 'nonsense'" in _until(process, 2)[-1]["message"]
        connection = {"repository": str(tiny_repository), "precision": "fp32"}
        _ask(process, 3, "connect", {"connection": connection})
        _ask(process, 4, "hello")  # while the model loads
        events = _until(process, 3)
        busy = [e for e in events if e["id"] == 4]
        assert busy[0]["kind"] == "refused" and busy[0]["message"].startswith("busy: request 3")
        assert events[-1]["event"] == "result"
        _ask(process, 5, "click", {"image": "nothing", "points": [[0, 0, 1]]})
        assert _until(process, 5)[-1]["kind"] == "refused"
        _ask(process, 6, "hello")
        pid = _until(process, 6)[-1]["result"]["pid"]
        assert pid == process.pid
    finally:
        process.stdin.close()  # stdin closing is a shutdown
        code = process.wait(60)
    assert code == 0


def test_shutdown_ends_the_worker_after_its_answer(tmp_path):
    process = _serve(tmp_path)
    _ask(process, 1, "shutdown")
    assert _until(process, 1)[-1] == {"v": 2, "id": 1, "event": "result", "result": {}}
    assert process.wait(60) == 0

"""A scene run resumes where it stopped (scene/journal.py): killed with SIGKILL mid-run, or
stopped by a full disk, `--resume` writes the very polygons of an uninterrupted run; a torn or
damaged record runs its tile again; a journal of another query, settings, model or raster is
refused with what differs."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import geopandas as gpd
import pandas as pd
import pytest

from napari_sam3.cli import main
from napari_sam3.core.errors import InvalidState, OutputExists
from napari_sam3.prompts.query import Query
from napari_sam3.scene import SceneSettings, segment_to_file
from napari_sam3.scene.journal import journal_path, journaled_tiles

QUERY = Query(keywords=["building", "water"], score_thr=0.0, max_det=5)
SETTINGS = SceneSettings(tile_size=128)  # the 300 x 420 crop: 12 tiles
CLI = ["--keywords", "building;water", "--score-thr", "0", "--max-det", "5", "--tile-size", "128"]


class Stop(BaseException):
    """Stands for the end of a process between two tiles (nothing after it runs)."""


def _stop_after(tiles: int):
    def progress(done: int, total: int) -> None:
        if done >= tiles:
            raise Stop

    return progress


@pytest.fixture(scope="module")
def reference(local_client, crop_tif, tmp_path_factory) -> Path:
    """The uninterrupted run's output."""
    out = tmp_path_factory.mktemp("reference") / "whole.gpkg"
    segment_to_file(local_client, crop_tif, out, QUERY, SETTINGS)
    return out


def _same_polygons(a: Path, b: Path) -> None:
    """The same rows (by label_id): the same WKB and every attribute equal."""
    left = gpd.read_file(a).sort_values("label_id", ignore_index=True)
    right = gpd.read_file(b).sort_values("label_id", ignore_index=True)
    assert len(left) == len(right) > 0
    assert left.geometry.to_wkb().tolist() == right.geometry.to_wkb().tolist()
    pd.testing.assert_frame_equal(
        pd.DataFrame(left.drop(columns="geometry")), pd.DataFrame(right.drop(columns="geometry"))
    )


def _stopped(local_client, raster, out: Path, tiles: int = 4) -> Path:
    with pytest.raises(Stop):
        segment_to_file(local_client, raster, out, QUERY, SETTINGS, progress=_stop_after(tiles))
    assert not out.exists() and journaled_tiles(journal_path(out)) == tiles
    return journal_path(out)


def test_the_cli_killed_mid_run_resumes_to_the_same_polygons(
    tiny_repository, crop_tif, reference, tmp_path
):
    out = tmp_path / "scene.gpkg"
    book = journal_path(out)
    before = hashlib.sha256(crop_tif.read_bytes()).hexdigest()
    argv = [sys.executable, "-m", "napari_sam3.cli", "segment", str(crop_tif), "--models",
            str(tiny_repository), "--precision", "fp32", *CLI, "--out", str(out), "--quiet"]  # fmt: skip
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while journaled_tiles(book) < 3 and run.poll() is None:
            time.sleep(0.02)
        assert run.poll() is None, f"the run ended before it was killed: {run.stdout.read()}"
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.kill()
        run.wait()
    held = journaled_tiles(book)
    assert run.returncode == -signal.SIGKILL and 3 <= held < 12 and not out.exists()
    # without --resume the unfinished run is not thrown away
    again = subprocess.run(argv, capture_output=True, text=True)
    assert again.returncode == 2 and "--resume" in again.stderr and "unfinished run" in again.stderr
    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"resumed: {held} of 12 tiles from the journal" in done.stdout
    _same_polygons(out, reference)
    assert not book.exists()  # written: the journal goes
    assert hashlib.sha256(crop_tif.read_bytes()).hexdigest() == before


def test_the_library_resumes_past_torn_and_damaged_records(
    local_client, crop_tif, reference, tmp_path
):
    out = tmp_path / "scene.gpkg"
    book = _stopped(local_client, crop_tif, out, tiles=5)
    records = sorted(book.glob("tile-*.bin"))
    torn = records[1].read_bytes()
    records[1].write_bytes(torn[: len(torn) // 2])  # a write cut short by a power loss
    damaged = bytearray(records[3].read_bytes())
    header = damaged.index(b"\n") + 1  # the magic line, then the header's length and itself
    (size,) = struct.unpack_from("<I", damaged, header)
    damaged[header + 4 + size + 3] ^= 0x01  # one bit of the first score: still a number
    records[3].write_bytes(bytes(damaged))
    (book / f".{records[4].name}.x1y2z3.bin").write_bytes(b"half")  # a kill mid-rename
    done = segment_to_file(local_client, crop_tif, out, QUERY, SETTINGS, resume=True)
    assert any("2 damaged record(s) dropped, their tiles run again" in w for w in done.warnings)
    assert done.frame.attrs["resumed_tiles"] == 3
    _same_polygons(out, reference)
    assert not book.exists()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"query": QUERY.replace(score_thr=0.2)}, "another query"),
        ({"settings": SETTINGS.replace(overlap=8)}, "other scene settings"),
        ({"model": True}, "another model"),
        ({"raster": True}, "the raster changed"),
    ],
)
def test_a_journal_of_another_run_is_refused_naming_what_differs(
    local_client, crop_tif, tmp_path, change, named
):
    raster = tmp_path / "scene.tif"
    raster.write_bytes(crop_tif.read_bytes())
    out = tmp_path / "scene.gpkg"
    book = _stopped(local_client, raster, out)
    client = local_client
    if "model" in change:
        client = _OtherModel(local_client)
    if "raster" in change:
        stat = raster.stat()
        os.utime(raster, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    query, settings = change.get("query", QUERY), change.get("settings", SETTINGS)
    with pytest.raises(InvalidState, match=named) as refused:
        segment_to_file(client, raster, out, query, settings, resume=True)
    assert str(book) in str(refused.value) and "start afresh" in str(refused.value)
    assert journaled_tiles(book) == 4 and not out.exists()  # refused: nothing touched


class _OtherModel:
    """The tiny model's client under another model id (a repository exported again)."""

    def __init__(self, client) -> None:
        self._client = client
        self.model_id = "f" * 64

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_a_journal_without_resume_is_an_unfinished_output(
    local_client, crop_tif, reference, tmp_path
):
    out = tmp_path / "scene.gpkg"
    book = _stopped(local_client, crop_tif, out)
    with pytest.raises(OutputExists, match="unfinished run of scene.gpkg .4 tiles finished"):
        segment_to_file(local_client, crop_tif, out, QUERY, SETTINGS)
    # overwrite starts afresh: the journal is replaced, said
    done = segment_to_file(local_client, crop_tif, out, QUERY, SETTINGS, overwrite=True)
    assert any("(4 tiles): this run starts afresh" in w for w in done.warnings)
    assert done.frame.attrs["resumed_tiles"] == 0 and not book.exists()
    _same_polygons(out, reference)


def test_a_full_disk_keeps_the_tiles_and_resume_writes_them(
    tiny_repository, crop_tif, reference, tmp_path
):
    """The GeoPackage cannot be written under a 64 KiB file-size limit (its tables alone take
    more), the tile records can: exit 1 naming the file and what to do, nothing partial, and
    --resume writes it from the journal without segmenting again."""
    out = tmp_path / "scene.gpkg"
    argv = ["segment", str(crop_tif), "--models", str(tiny_repository), "--precision", "fp32",
            *CLI, "--out", str(out), "--quiet"]  # fmt: skip
    full = subprocess.run(
        [sys.executable, "-c", LIMITED, str(64 * 1024), *argv], capture_output=True, text=True
    )
    assert full.returncode == 1, full.stderr
    assert f"cannot write {out}: File too large" in full.stderr and "free space" in full.stderr
    assert "12 finished tiles are kept" in full.stderr and "--resume" in full.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [journal_path(out).name]
    assert main([*argv, "--resume"]) == 0
    _same_polygons(out, reference)


# The CLI under a file-size limit (argv[1] bytes); SIGXFSZ ignored, so a write past it fails.
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from napari_sam3.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_the_qgis_worker_resumes_the_journal_of_its_raster(
    local_client, tiny_repository, crop_tif, tmp_path
):
    """The provider's worker (run by any Python with napari_sam3, as QGIS runs it) continues
    the journal folder the provider gives it with RESUME, and removes that run's folder once
    the output is written."""
    worker = Path(__file__).parents[2] / "qgis_plugin" / "napari_sam3_qgis" / "worker.py"
    query = Query(keywords=["building", "water"], score_thr=0.0, max_det=5)
    whole = tmp_path / "whole.fgb"
    segment_to_file(local_client, crop_tif, whole, query, SceneSettings(), name=crop_tif.name)
    book = tmp_path / "profile" / "runs" / "abc" / "tiles"
    book.parent.mkdir(parents=True)
    with pytest.raises(Stop):
        segment_to_file(local_client, crop_tif, tmp_path / "x.fgb", query, SceneSettings(),
                        name=crop_tif.name, journal=book, progress=_stop_after(3))  # fmt: skip
    job = {"action": "segment", "raster": str(crop_tif), "keywords": "building, water",
           "score_thr": 0.0, "max_det": 5, "output": str(tmp_path / "result.fgb"),
           "connection": {"repository": str(tiny_repository), "precision": "fp32"},
           "journal": str(book), "resume": True}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    with (tmp_path / "worker.log").open("w") as log:  # stdin kept open: closing it cancels
        worker = subprocess.Popen(
            [sys.executable, str(worker), str(tmp_path / "job.json")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
        said = worker.stdout.read()
        worker.stdin.close()
        assert worker.wait() == 0, said + (tmp_path / "worker.log").read_text()
    events = [json.loads(line) for line in said.splitlines()]
    assert any("resumed: 3 of" in e.get("message", "") for e in events), events
    _same_polygons(tmp_path / "result.fgb", whole)
    assert not book.parent.exists()

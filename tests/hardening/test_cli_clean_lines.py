"""The CLI answers in clean lines, serial and parallel, and Ctrl-C exits 130 (issue 24).

On the code before: exemplars on a LOCAL_CS raster gave a pyproj ProjError traceback; a 1x1
raster's message asked for `channel_axis=`, which the CLI does not have; `--workers` with a
read-only output folder gave a PermissionError traceback, and a folder of good and bad rasters
dask's "Compute Failed ... Traceback" lines; Ctrl-C a KeyboardInterrupt traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import geopandas as gpd
import pytest
from rasterio.crs import CRS
from shapely.geometry import box

from napari_sam3.cli import main
from napari_sam3.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_REFUSED

from .._rasters import write_geotiff

LOCAL_CS = (
    'LOCAL_CS["arbitrary",LOCAL_DATUM["arbitrary",32767],UNIT["metre",1],'
    'AXIS["Easting",EAST],AXIS["Northing",NORTH]]'
)


@pytest.fixture(scope="module")
def rasters(s2_rgb_raster, tmp_path_factory) -> Path:
    """Good crops, a 1x1 raster, a broken .tif, and a crop whose CRS is a LOCAL_CS."""
    root = tmp_path_factory.mktemp("mixed")
    data, t, crs = s2_rgb_raster.data, s2_rgb_raster.transform, s2_rgb_raster.crs
    write_geotiff(root / "good_a.tif", data[:, :120, :150], t, crs, dtype="uint16")
    write_geotiff(root / "good_b.tif", data[:, 200:320, 300:450], t, crs, dtype="uint16")
    write_geotiff(root / "one_pixel.tif", data[:, :1, :1], t, crs, dtype="uint16")
    (root / "broken.tif").write_bytes(b"II*\x00" + bytes(range(256)) * 4)
    local = tmp_path_factory.mktemp("local")
    write_geotiff(
        local / "local.tif", data[:, :120, :150], t, CRS.from_wkt(LOCAL_CS), dtype="uint16"
    )
    x0, y1 = t * (20, 20)
    x1, y0 = t * (60, 60)
    gpd.GeoDataFrame(geometry=[box(x0, y0, x1, y1)], crs=crs).to_file(local / "ex.gpkg")
    return root


def _no_traceback(text: str) -> None:
    for marker in ("Traceback", "Compute Failed", "ProjError", 'File "'):
        assert marker not in text, f"{marker!r} in the output:\n{text}"


def test_a_one_pixel_raster_gets_a_message_without_channel_axis(
    tiny_repository, rasters, tmp_path, capfd
):
    code = main(
        ["segment", str(rasters / "one_pixel.tif"), "--prompt", "field", "--models",
         str(tiny_repository), "--precision", "fp32", "--out", str(tmp_path / "o.gpkg"), "--quiet"]
    )  # fmt: skip
    err = capfd.readouterr().err
    assert code == EXIT_FAILED
    assert "one_pixel.tif is 1 x 1 px: too small to segment (at least 4 x 4 px)" in err
    assert "channel_axis" not in err
    _no_traceback(err)


def test_exemplars_on_a_local_cs_raster_are_refused_in_one_line(
    tiny_repository, rasters, tmp_path, capfd
):
    local = next(p for p in rasters.parent.iterdir() if (p / "local.tif").exists())
    code = main(
        ["segment", str(local / "local.tif"), "--exemplars", str(local / "ex.gpkg"), "--models",
         str(tiny_repository), "--precision", "fp32", "--out", str(tmp_path / "o.gpkg"), "--quiet"]
    )  # fmt: skip
    err = capfd.readouterr().err
    assert code == EXIT_REFUSED
    assert "cannot be reprojected from 'WGS 84 / UTM zone 33N'" in err
    assert "give the exemplars in the raster's own CRS" in err
    _no_traceback(err)


def test_workers_on_good_and_bad_rasters_print_one_line_per_failure(
    tiny_repository, rasters, tmp_path, capfd
):
    out = tmp_path / "out"
    code = main(
        ["segment", str(rasters), "--prompt", "field", "--models", str(tiny_repository), "--precision", "fp32",
         "--out", str(out), "--workers", "2", "--quiet", "--tile-size", "112"]
    )  # fmt: skip
    captured = capfd.readouterr()
    assert code == EXIT_FAILED
    assert sorted(p.name for p in out.glob("*.gpkg")) == ["good_a.gpkg", "good_b.gpkg"]
    err = captured.err
    assert "FAILED" in err and "broken.tif: BadData: cannot read" in err
    assert "one_pixel.tif: InvalidInput: raster one_pixel.tif is 1 x 1 px" in err
    assert "2 of 4 rasters segmented" in captured.out
    _no_traceback(captured.out + err)


def _read_only_folder_command(folder: Path, argv: list[str]) -> list[str]:
    """The command run with `folder` read-only: a read-only mount in a mount namespace of its
    own when run as root (root writes through permission bits), else permission bits."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return argv
    if shutil.which("unshare") is None:
        pytest.fail("running as root needs util-linux's unshare for a read-only folder")
    script = 'mount -t tmpfs -o ro,size=1m tmpfs "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, str(folder), *argv]


def test_workers_into_a_read_only_folder_are_refused_in_one_line(
    tiny_repository, rasters, tmp_path
):
    out = tmp_path / "read-only"
    out.mkdir()
    argv = [sys.executable, "-m", "napari_sam3.cli", "segment", str(rasters / "good_a.tif"),
            "--prompt", "field", "--models", str(tiny_repository), "--precision", "fp32", "--out", str(out),
            "--workers", "2", "--quiet"]  # fmt: skip
    try:
        run = subprocess.run(
            _read_only_folder_command(out, argv), capture_output=True, text=True, timeout=600
        )
    finally:
        out.chmod(0o755)
    assert run.returncode == EXIT_REFUSED, run.stderr
    assert f"cannot write in the output folder {out} (read-only" in run.stderr
    _no_traceback(run.stdout + run.stderr)
    assert list(out.iterdir()) == []


def _interruptible() -> None:
    """In the CLI's process, before it starts: Ctrl-C's default action. A shell without job
    control starts its background jobs with SIGINT ignored, Python keeps that, and the CLI
    would then run to the end whatever the test sends (the suite must not depend on how it was
    launched)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_says_nothing_was_written_and_exits_130(tiny_repository, rasters, tmp_path):
    """SIGINT while a merged layer (written only at the end) is being made."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(12):
        shutil.copy(rasters / "good_a.tif", many / f"scene_{i:02d}.tif")
    out = tmp_path / "merged.gpkg"
    proc = subprocess.Popen(
        [sys.executable, "-m", "napari_sam3.cli", "segment", str(many), "--prompt", "field",
         "--models", str(tiny_repository), "--precision", "fp32", "--out", str(out), "--tile-size", "112"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible,
    )  # fmt: skip
    lines = []
    for line in proc.stdout:  # the first raster done: the run is well under way
        lines.append(line)
        if "scene_00.tif:" in line:
            proc.send_signal(signal.SIGINT)
            break
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    assert stderr.rstrip().endswith("napari-sam3: interrupted, nothing written")
    _no_traceback("".join(lines) + stdout + stderr)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".merged")] == []


def test_ctrl_c_on_workers_stops_them_between_tiles_and_exits_130(
    tiny_repository, rasters, tmp_path
):
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, once a --workers 2
    run has finished a scene: the workers stop at their next tile without a traceback, the
    scenes finished first are in the journal and named, and nothing else is in the folder."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(12):
        shutil.copy(rasters / "good_a.tif", many / f"scene_{i:02d}.tif")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "napari_sam3.cli", "segment", str(many), "--prompt", "field",
         "--models", str(tiny_repository), "--precision", "fp32", "--out", str(out), "--tile-size", "112",
         "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_interruptible,
    )  # fmt: skip
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "objects ->" in line:
                os.killpg(proc.pid, signal.SIGINT)
                break
        stdout, stderr = proc.communicate(timeout=300)
    finally:  # a run that did not stop leaves no process group behind
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    _no_traceback("".join(lines) + stdout + stderr)
    last = stderr.rstrip().splitlines()[-1]
    assert last.startswith("napari-sam3: interrupted; nothing partial written, finished before: ")
    named = {Path(p).name for p in last.split("finished before: ")[1].split(", ")}
    journal = json.loads((out / "napari-sam3-journal.json").read_text())["scenes"]
    written = {p.name for p in out.glob("*.gpkg")}
    assert named == written == {entry["output"] for entry in journal.values()}
    assert 1 <= len(written) < 12
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []
    for path in out.glob("*.gpkg"):
        gpd.read_file(path)  # every file there is whole

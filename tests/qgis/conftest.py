"""The real QGIS, headless: the plugin installed by scripts/install_qgis_plugin.sh into a
temporary HOME, run through `qgis_process` and through `processing.run` in QGIS's own Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio

from napari_sam3.runtime.onnx_runner import default_cache_dir

ROOT = Path(__file__).resolve().parents[2]
QGIS_PYTHON = "/usr/bin/python3"  # the interpreter Debian's QGIS embeds
DRIVER = Path(__file__).with_name("processing_driver.py")
# The Python the plugin's worker runs: this test run's own, or (a development checkout whose
# napari_sam3 is not the installed one) an interpreter wrapper that puts that checkout first.
WORKER_PYTHON = os.environ.get("SAM3_TEST_WORKER_PYTHON") or sys.executable


def _require_qgis() -> None:
    if shutil.which("qgis_process.bin") is None and shutil.which("qgis_process") is None:
        pytest.fail("QGIS is not installed: scripts/setup.sh installs qgis and python3-qgis")


@pytest.fixture(scope="session")
def qgis_env(tmp_path_factory) -> dict[str, str]:
    """The environment of an analyst's new shell after `install_qgis_plugin.sh`: a HOME with the
    plugin enabled in the default profile, napari-sam3's Python recorded (this test run's own),
    and a working `qgis_process` first on PATH."""
    _require_qgis()
    home = tmp_path_factory.mktemp("qgis_home")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("QGIS", "NAPARI_SAM3", "PYTHON", "XDG_", "QT_"))
    }
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_RUNTIME_DIR=str(home / "runtime"),
        NAPARI_SAM3_BIN_DIR=str(home / "bin"),
        QT_QPA_PLATFORM="offscreen",
    )
    (home / "runtime").mkdir(mode=0o700)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install_qgis_plugin.sh"), "--python", WORKER_PYTHON],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("NAPARI_SAM3_BIN_DIR")
    # The worker's compiled-model cache is this test run's own (OpenVINO's, under the user's
    # cache folder, as the analyst's second run finds it): without it each session compiled the
    # tiny graphs again in the new HOME.
    env["XDG_CACHE_HOME"] = str(default_cache_dir().parents[1])
    return env


@pytest.fixture(scope="session")
def profile(qgis_env) -> Path:
    return Path(qgis_env["XDG_DATA_HOME"]) / "QGIS" / "QGIS3" / "profiles" / "default"


def _write_tif(path: Path, raster, crs=True) -> Path:
    profile = {
        "driver": "GTiff",
        "count": raster.data.shape[0],
        "height": raster.data.shape[1],
        "width": raster.data.shape[2],
        "dtype": raster.data.dtype,
    }
    if crs:
        profile.update(crs=raster.crs, transform=raster.transform)
    with rasterio.open(path, "w", **profile) as ds:
        ds.write(raster.data)
    return path


@pytest.fixture(scope="session")
def s2_tif(s2_crop, tmp_path_factory) -> Path:
    """The 300 x 420 Sentinel-2 true-colour crop as a GeoTIFF (EPSG:32633): 15 tiny-model tiles."""
    return _write_tif(tmp_path_factory.mktemp("rasters") / "s2.tif", s2_crop)


@pytest.fixture(scope="session")
def s2_folder(s2_rgb_paths, tmp_path_factory) -> Path:
    """Two GeoTIFFs of other parts of the scene in a folder."""
    from napari_sam3.imagery.raster import read_raster

    folder = tmp_path_factory.mktemp("folder")
    for name, window in (("north", np.s_[0:160, 0:240]), ("south", np.s_[500:660, 800:1040])):
        _write_tif(folder / f"{name}.tif", read_raster(s2_rgb_paths, window=window))
    return folder


@pytest.fixture(scope="session")
def no_crs_tif(s2_crop, tmp_path_factory) -> Path:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
        return _write_tif(tmp_path_factory.mktemp("nocrs") / "plain.tif", s2_crop, crs=False)


def qgis_process(
    env: dict[str, str], algorithm: str, verbose: bool = False, **parameters
) -> subprocess.CompletedProcess:
    """`qgis_process --json run ALGORITHM --NAME=VALUE ...` as an analyst types it (a list value
    repeats the parameter; `verbose`: with the worker's own messages)."""
    args = ["qgis_process", "--json", *(["--verbose"] if verbose else []), "run", algorithm]
    for name, value in parameters.items():
        for item in value if isinstance(value, list) else [value]:
            args.append(f"--{name}={item}")
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)


def results(done: subprocess.CompletedProcess) -> dict:
    """The `results` of `qgis_process --json` (it prints the JSON after its log lines)."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout[done.stdout.index("{") :])["results"]


def processing_run(env: dict[str, str], profile: Path, runs: list[dict], tmp_path) -> list[dict]:
    """Each run through `processing.run` in one standalone QgsApplication (QGIS's Python)."""
    spec = tmp_path / f"runs-{len(list(tmp_path.glob('runs-*')))}.json"
    spec.write_text(json.dumps(runs))
    lines = drive(DRIVER, [profile, spec], env)
    assert len(lines) == len(runs), lines
    return lines


def drive(driver: Path, arguments: list, env: dict[str, str]) -> list[dict]:
    """The JSON lines a driver script printed, run in QGIS's own Python (it must exit 0)."""
    done = subprocess.run(
        [QGIS_PYTHON, str(driver), *map(str, arguments)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

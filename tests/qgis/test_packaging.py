"""The plugin's zip for the QGIS plugin repository: every file of the plugin under one folder,
metadata.txt with the repository's mandatory keys and napari-sam3's version."""

from __future__ import annotations

import configparser
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "qgis_plugin" / "napari_sam3_qgis"


def test_the_zip_holds_the_plugin_under_its_folder_with_valid_metadata(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_qgis_plugin_zip.py"), "--out", tmp_path],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    target = tmp_path / f"napari_sam3_qgis-{version}.zip"
    assert done.stdout.strip() == str(target)
    sources = {
        f"napari_sam3_qgis/{p.relative_to(PLUGIN).as_posix()}"
        for p in PLUGIN.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    with zipfile.ZipFile(target) as archive:
        names = set(archive.namelist()) - {"napari_sam3_qgis/LICENSE"}
        metadata = archive.read("napari_sam3_qgis/metadata.txt").decode()
    assert names == sources
    assert {"napari_sam3_qgis/__init__.py", "napari_sam3_qgis/worker.py"} <= names
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read_string(metadata)
    general = parser["general"]
    for key in ("name", "qgisMinimumVersion", "description", "about", "version", "author",
                "email", "repository"):  # fmt: skip
        assert general.get(key), key
    assert general["version"] == version
    assert general["hasProcessingProvider"] == "yes"
    assert f"napari_sam3_qgis/{general['icon']}" in names

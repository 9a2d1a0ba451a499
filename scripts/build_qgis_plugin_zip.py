"""Builds the QGIS plugin's zip for the QGIS plugin repository (plugins.qgis.org) or for
*Plugins > Manage and Install Plugins > Install from ZIP*: dist/napari_sam3_qgis-VERSION.zip.

    python3 scripts/build_qgis_plugin_zip.py [--out FOLDER]

It checks metadata.txt first: the repository's mandatory keys, a version equal to napari-sam3's
(pyproject.toml: the plugin is tested with that library), the icon it names. Placeholder URLs
and a missing LICENSE are reported (the repository refuses both); the zip is still written for
local installs. Standard library only.
"""

from __future__ import annotations

import argparse
import configparser
import os
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "qgis_plugin" / "napari_sam3_qgis"
MANDATORY = ("name", "qgisMinimumVersion", "description", "about", "version", "author", "email",
             "repository")  # fmt: skip
SKIP = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def metadata_problems() -> tuple[list[str], list[str], dict[str, str]]:
    """(errors, warnings, the [general] section) of metadata.txt."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # QGIS's keys are case-sensitive (qgisMinimumVersion)
    parser.read(PLUGIN / "metadata.txt", encoding="utf-8")
    general = dict(parser["general"]) if parser.has_section("general") else {}
    errors = [f"metadata.txt lacks {key}=" for key in MANDATORY if not general.get(key)]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    if general.get("version") and general["version"] != version:
        errors.append(f"metadata.txt version {general['version']} is not napari-sam3's {version}")
    if general.get("icon") and not (PLUGIN / general["icon"]).is_file():
        errors.append(f"metadata.txt names icon {general['icon']}, which is not in the plugin")
    if general.get("hasProcessingProvider") != "yes":
        errors.append("metadata.txt must say hasProcessingProvider=yes (qgis_process loads it)")
    warnings = [
        f"{key}={general[key]} is a placeholder: set the project's real URL before uploading"
        for key in ("repository", "tracker", "homepage")
        if ".invalid" in general.get(key, "")
    ]
    if not (ROOT / "LICENSE").is_file():
        warnings.append("no LICENSE file at the repository root: plugins.qgis.org requires one")
    return errors, warnings, general


def build(out_dir: Path) -> Path:
    errors, warnings, general = metadata_problems()
    for text in warnings:
        print(f"build_qgis_plugin_zip: warning: {text}", file=sys.stderr)
    if errors:
        raise SystemExit("build_qgis_plugin_zip: " + "; ".join(errors))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{PLUGIN.name}-{general['version']}.zip"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=out_dir)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(PLUGIN.rglob("*")):
                parts = set(path.relative_to(PLUGIN).parts)
                if path.is_file() and not parts & SKIP and path.suffix != ".pyc":
                    archive.write(path, f"{PLUGIN.name}/{path.relative_to(PLUGIN).as_posix()}")
            if (ROOT / "LICENSE").is_file():
                archive.write(ROOT / "LICENSE", f"{PLUGIN.name}/LICENSE")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="folder (default dist/)")
    print(build(parser.parse_args().out))


if __name__ == "__main__":
    main()

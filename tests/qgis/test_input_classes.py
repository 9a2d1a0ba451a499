"""Issue 42, item 1, in QGIS: a keyword the library refuses (one control character, a zero-width
space, a lone surrogate) fails the Processing algorithm with a QgsProcessingException carrying the
library's message; a raster placed nowhere is refused with the library's message, and one far
outside its CRS's area of use runs with the library's warning on the feedback (pushWarning)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.placement import check_placement
from napari_sam3.imagery.raster import raster_info
from napari_sam3.prompts.keywords import check_keyword

from .conftest import processing_run

BAD_KEYWORDS = {"control": "\x01", "zero-width": "\u200b", "surrogate": "road\ud800"}


def _tif(path, x0, y0):
    data = np.random.default_rng(0).integers(1, 255, (3, 120, 120), np.uint8)
    profile = dict(driver="GTiff", count=3, height=120, width=120, dtype="uint8")
    with rasterio.open(
        path, "w", crs="EPSG:32633", transform=from_origin(x0, y0, 10, 10), **profile
    ) as ds:
        ds.write(data)
    return path


@pytest.fixture(scope="module")
def runs(qgis_env, profile, s2_tif, tiny_repository, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("input_classes")
    model = {"MODELS": str(tiny_repository), "PRECISION": "fp32"}
    rasters = {
        "nowhere": _tif(tmp / "nowhere.tif", 1e9, 1e9),
        "far": _tif(tmp / "far.tif", 3_500_000, 5_800_000),
    }
    steps = {
        **{
            name: {"INPUT": str(s2_tif), "KEYWORDS": word, "OUTPUT": str(tmp / f"{name}.gpkg")}
            for name, word in BAD_KEYWORDS.items()
        },
        **{
            name: {"INPUT": str(path), "KEYWORDS": "building", "OUTPUT": str(tmp / f"{name}.gpkg")}
            for name, path in rasters.items()
        },
    }
    spec = [
        {"algorithm": "napari_sam3:segment_text", "parameters": {**parameters, **model}}
        for parameters in steps.values()
    ]
    done = processing_run(qgis_env, profile, spec, tmp)
    return dict(zip(steps, done, strict=True)), tmp, rasters


@pytest.mark.parametrize("name", list(BAD_KEYWORDS))
def test_a_refused_keyword_is_a_processing_exception_with_the_library_message(runs, name):
    done, tmp, _ = runs
    with pytest.raises(InvalidInput) as caught:
        check_keyword(BAD_KEYWORDS[name])
    assert not done[name]["ok"]
    assert done[name]["error"] == str(caught.value)
    assert not (tmp / f"{name}.gpkg").exists()


def test_a_raster_placed_nowhere_is_refused_and_one_far_outside_is_warned_about(runs):
    done, tmp, rasters = runs
    with pytest.raises(InvalidInput) as caught:
        check_placement(raster_info(rasters["nowhere"]))
    assert not done["nowhere"]["ok"] and done["nowhere"]["error"] == str(caught.value)
    assert not (tmp / "nowhere.gpkg").exists()
    line = check_placement(raster_info(rasters["far"]), warn=False)
    assert done["far"]["ok"], done["far"]
    assert line in done["far"]["warnings"]
    assert (tmp / "far.gpkg").exists()

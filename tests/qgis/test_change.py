"""napari_sam3:change through `processing.run` in QGIS's own Python: the library's change table,
styled by class when QGIS loads it; refusals are QgsProcessingExceptions with the library's
message."""

from __future__ import annotations

import geopandas as gpd
import pandas as pd
import pytest
from rasterio.transform import Affine

from napari_sam3.change import CHANGE_CLASSES, change_between
from napari_sam3.change.style import CHANGE_COLOURS
from napari_sam3.prompts.query import Query
from napari_sam3.scene.settings import SceneSettings

from .._rasters import later_date, write_geotiff
from .conftest import processing_run


@pytest.fixture(scope="module")
def dates(s2_crop, s2_tif, tmp_path_factory):
    """before: s2.tif; after: its pixels cut by 20 rows and 30 columns (a grid whose origin
    moved with them) with a block painted as nodata; far: a raster 100 km away."""
    folder = tmp_path_factory.mktemp("change_dates")
    after, _ = later_date(folder, s2_crop)
    far = Affine.translation(100_000, 0) * s2_crop.transform
    return {
        "before": s2_tif,
        "after": after,
        "far": write_geotiff(folder / "far.tif", s2_crop.data, far, s2_crop.crs),
        "folder": folder,
    }


@pytest.fixture(scope="module")
def runs(qgis_env, profile, dates, tiny_repository):
    folder = dates["folder"]
    common = {
        "KEYWORDS": "building, field",
        "MODELS": str(tiny_repository),
        "PRECISION": "fp32",  # local_client's
        "SCORE_THR": 0,
        "MAX_DET": 5,
    }
    spec = [
        {
            "algorithm": "napari_sam3:change",
            "parameters": {
                "BEFORE": str(dates["before"]),
                "AFTER": str(dates["after"]),
                **common,
                "OUTPUT": str(folder / "changes.gpkg"),
            },
            "load": True,
        },
        {
            "algorithm": "napari_sam3:change",
            "parameters": {
                "BEFORE": str(dates["before"]),
                "AFTER": str(dates["far"]),
                **common,
                "OUTPUT": str(folder / "never.gpkg"),
            },
        },
    ]
    return processing_run(qgis_env, profile, spec, folder)


def test_change_is_the_library_s_table_styled_by_class(runs, dates, local_client):
    done = runs[0]
    assert done["ok"], done
    got = gpd.read_file(done["results"]["OUTPUT"])
    assert set(got["change"]) <= set(CHANGE_CLASSES) and len(got)
    query = Query(keywords=("building", "field"), score_thr=0.0, max_det=5)
    want, _ = change_between(
        local_client, [str(dates["before"]), str(dates["after"])], query, SceneSettings()
    )
    assert got.crs == want.crs
    columns = ["change", "keyword", "before_score", "after_score", "iou"]
    order = ["change", "keyword", "iou", "before_score", "after_score"]
    g = got.sort_values(order).reset_index(drop=True)
    w = want.sort_values(order).reset_index(drop=True)
    pd.testing.assert_frame_equal(g[columns], w[columns], check_dtype=False, atol=1e-6)
    assert g.geometry.geom_equals_exact(w.geometry, 0.01).all()
    # the same pixels on a moved grid: nothing new or gone, the painted block unknown
    assert set(got["change"]) <= {"same", "unknown"}
    assert (got["reason"] == "fill").any()
    (style,) = done["style"].values()
    assert style["renderer"] == "categorizedSymbol" and style["attribute"] == "change"
    assert set(style["categories"]) == set(CHANGE_CLASSES)
    for name, colour in CHANGE_COLOURS.items():
        if name != "unknown":  # an outline only
            assert style["categories"][name] == colour


def test_scenes_that_do_not_overlap_are_refused_with_the_library_message(runs, dates):
    done = runs[1]
    assert not done["ok"]
    assert "after.tif" not in done["error"] and "does not overlap s2.tif" in done["error"], done
    assert not (dates["folder"] / "never.gpkg").exists()

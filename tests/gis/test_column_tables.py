"""The column table (core/columns.py): every producer builds exactly the columns it lists."""

from __future__ import annotations

import numpy as np
import pytest

from napari_sam3.core.columns import (
    FEATURE_COLUMNS,
    POLYGON_COLUMNS,
    PROVENANCE_COLUMNS,
    RESULT_COLUMNS,
    SCENE_COLUMNS,
)


@pytest.mark.timeout(1500)  # the first model test of a session pays the shared export
def test_the_client_returns_the_result_columns(local_client, s2_scene_tif):
    from napari_sam3.imagery.raster import read_raster

    image = read_raster(s2_scene_tif).data
    found = local_client.segment(image, "building", score_thr=0.0, max_det=2)
    none = local_client.segment(image, "building", score_thr=1.0)
    assert len(found) and not len(none)
    assert list(found.columns) == RESULT_COLUMNS
    assert list(none.columns) == RESULT_COLUMNS


def test_a_scene_has_the_scene_and_provenance_columns(scene_result, local_client, s2_scene_tif):
    from napari_sam3.scene import segment_scene

    assert list(scene_result.columns) == [*SCENE_COLUMNS, *PROVENANCE_COLUMNS]
    empty = segment_scene(local_client, s2_scene_tif, "building", score_thr=1.0, progress=False)
    assert not len(empty) and list(empty.columns) == SCENE_COLUMNS


def test_polygons_carry_the_polygon_columns_first(scene_result, s2_scene_tif):
    from napari_sam3.gis.vector import to_geodataframe

    gdf = to_geodataframe(scene_result, s2_scene_tif)
    columns = list(gdf.columns)
    assert columns[: len(POLYGON_COLUMNS)] == POLYGON_COLUMNS
    assert columns[-1] == "geometry"
    rest = columns[len(POLYGON_COLUMNS) : -1]
    assert rest == [c for c in scene_result.columns if c not in {"box", "mask", *POLYGON_COLUMNS}]


def test_napari_features_have_the_feature_columns(scene_result):
    from napari_sam3.plugin.widgets._layers import results_to_labels
    from napari_sam3.plugin.widgets.results_table import COLUMNS

    labels, features = results_to_labels(scene_result, (240, 300), "s2_window.tif")
    assert list(features.columns) == FEATURE_COLUMNS
    assert labels.max() == len(features)
    assert np.array_equal(features["index"], np.arange(1, len(features) + 1))
    assert COLUMNS == ("layer", *FEATURE_COLUMNS, "image")

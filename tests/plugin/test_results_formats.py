"""The results table offers every vector format the writer writes, and each offer writes."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from napari_sam3.core.formats import VECTOR_FORMATS, read_vector_file


def offered_suffixes(file_filter: str) -> list[str]:
    return [s.lstrip("*") for s in re.findall(r"\*\.\w+", file_filter)]


def test_the_export_dialog_offers_every_vector_format():
    from napari_sam3.plugin.widgets.results_table import EXPORT_FILTER

    assert offered_suffixes(EXPORT_FILTER) == list(VECTOR_FORMATS)


@pytest.mark.parametrize("suffix", list(VECTOR_FORMATS))
def test_every_offered_format_exports_the_objects(tmp_path, suffix):
    from napari.layers import Labels

    from napari_sam3.plugin.widgets.results_table import export_objects

    data = np.zeros((40, 50), np.int32)
    data[5:15, 5:20] = 1
    data[20:35, 25:45] = 2
    features = pd.DataFrame(
        {
            "index": [1, 2],
            "score": [0.9, 0.6],
            "keyword": ["building", "road"],
            "prompt_kind": ["text", "text"],
            "source": ["scene.tif", "scene.tif"],
        }
    )
    metadata = {"crs": "EPSG:32633", "transform": [10.0, 0.0, 300000.0, 0.0, -10.0, 5800000.0]}
    layer = Labels(data, features=features, metadata=metadata, name="SAM3 building, road")
    path = export_objects(layer, tmp_path / f"objects{suffix}")
    back = read_vector_file(path).sort_values("label").reset_index(drop=True)
    assert back["keyword"].tolist() == ["building", "road"]
    areas = back.to_crs("EPSG:32633").area.to_numpy()
    np.testing.assert_allclose(areas, [150 * 100.0, 300 * 100.0], rtol=1e-4)

"""The format tables (core/formats.py): every output format is written and read back, every vector
input is read, and the copies that cannot import the table (QGIS, napari.yaml) match it."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rasterio
import yaml

from napari_sam3.core.formats import (
    FORMAT_SUFFIXES,
    NAPARI_VECTOR_INPUTS,
    OUTPUT_FORMATS,
    VECTOR_FORMATS,
    VECTOR_INPUTS,
    read_vector_file,
)
from napari_sam3.gis.vector import (
    masks_to_labels,
    to_geodataframe,
    write_labels_geotiff,
    write_vector,
)
from napari_sam3.prompts.vector import exemplar_boxes

ROOT = Path(__file__).resolve().parents[2]
VECTORS = [f for f in OUTPUT_FORMATS.values() if f.vector]
RASTERS = [f for f in OUTPUT_FORMATS.values() if not f.vector]


@pytest.fixture
def detections(utm21_tif) -> pd.DataFrame:
    """Two rectangles on the 240 x 300 UTM 21N window, the higher score first."""
    masks = []
    for r0, c0, r1, c1 in ((20, 10, 60, 50), (30, 60, 90, 100)):
        mask = np.zeros((240, 300), bool)
        mask[r0:r1, c0:c1] = True
        masks.append(mask)
    return pd.DataFrame(
        {
            "box": [
                np.array([10, 20, 50, 60], np.float32),
                np.array([60, 30, 100, 90], np.float32),
            ],
            "score": np.array([0.9, 0.7], np.float32),
            "mask": masks,
            "keyword": ["building", "building"],
            "prompt_kind": ["text", "text"],
        }
    )


@pytest.mark.parametrize("fmt", VECTORS, ids=lambda f: f.name)
def test_every_vector_format_is_written_and_read_back(tmp_path, detections, utm21_tif, fmt):
    expected = to_geodataframe(detections, utm21_tif)
    path = write_vector(expected, tmp_path / f"out{fmt.suffix}")
    assert path.suffix == FORMAT_SUFFIXES[fmt.name]
    back = read_vector_file(path).sort_values("label_id").reset_index(drop=True)
    assert len(back) == 2
    np.testing.assert_allclose(back["score"], expected["score"], rtol=1e-6)
    # GeoJSON is written in EPSG:4326 to 7 decimals; compare areas on the raster's grid
    areas = back.to_crs(expected.crs).area.to_numpy()
    np.testing.assert_allclose(areas, expected.area.to_numpy(), rtol=1e-4)
    if fmt.driver != "Parquet":  # GDAL names the driver that reads it back
        import pyogrio

        assert pyogrio.read_info(path)["driver"] == fmt.driver


@pytest.mark.parametrize("fmt", RASTERS, ids=lambda f: f.name)
def test_every_label_format_is_written_and_read_back(tmp_path, detections, utm21_tif, fmt):
    labels = masks_to_labels(detections, (240, 300))
    path = write_labels_geotiff(
        labels, tmp_path / f"labels{fmt.suffix}", utm21_tif, cog=fmt.driver == "COG"
    )
    with rasterio.open(path) as ds, rasterio.open(utm21_tif) as src:
        np.testing.assert_array_equal(ds.read(1), labels)
        assert ds.crs == src.crs and ds.transform == src.transform
        layout = ds.tags(ns="IMAGE_STRUCTURE").get("LAYOUT")
        assert (layout == "COG") == (fmt.driver == "COG")


def test_an_unknown_suffix_is_refused_naming_every_format(tmp_path, detections, utm21_tif):
    gdf = to_geodataframe(detections, utm21_tif)
    with pytest.raises(ValueError, match="unsupported extension .kml") as error:
        write_vector(gdf, tmp_path / "out.kml")
    for fmt in VECTORS:
        assert f"{fmt.suffix} ({fmt.label})" in str(error.value)


@pytest.mark.parametrize("suffix", VECTOR_INPUTS)
def test_every_vector_input_gives_exemplars(tmp_path, detections, utm21_tif, suffix):
    """Each input suffix is read (a .json is GeoJSON under its generic name)."""
    gdf = to_geodataframe(detections, utm21_tif)
    written = suffix if suffix in VECTOR_FORMATS else ".geojson"
    path = write_vector(gdf, tmp_path / f"exemplars{written}")
    if written != suffix:
        path = Path(shutil.move(path, path.with_suffix(suffix)))
    boxes, labels = exemplar_boxes(path, utm21_tif)
    np.testing.assert_allclose(
        sorted(boxes.tolist()), [[10, 20, 50, 60], [60, 30, 100, 90]], atol=1e-3
    )
    assert labels.tolist() == [1, 1]


def test_qgis_folder_algorithm_offers_the_formats_of_the_table():
    """QGIS never imports napari_sam3, so segment_folder.py keeps a copy of the names."""
    source = ROOT / "qgis_plugin" / "napari_sam3_qgis" / "segment_folder.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    (copy,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "FORMATS" for t in node.targets)
    ]
    assert copy == list(OUTPUT_FORMATS), "update FORMATS in " + str(source.relative_to(ROOT))


def test_napari_manifest_reads_the_vector_inputs_of_the_table():
    """napari.yaml is static: its vector reader's patterns are a copy of NAPARI_VECTOR_INPUTS."""
    manifest = yaml.safe_load(
        (ROOT / "src" / "napari_sam3" / "napari.yaml").read_text(encoding="utf-8")
    )
    (reader,) = [
        r
        for r in manifest["contributions"]["readers"]
        if r["command"] == "napari-sam3.get_vector_reader"
    ]
    assert sorted(reader["filename_patterns"]) == sorted(f"*{s}" for s in NAPARI_VECTOR_INPUTS)

"""The file formats: what the writers write, and which vector files count as input. One table each.

Every front end reads them: the writers (``gis/vector.py``, ``scene/output.py``), the command
line's ``--out`` and ``--format``, folder runs (``scene/batch.py``), the napari results table's
export and the vector readers (exemplars, areas of interest, napari). Two static places cannot
import this module and keep a copy that a test compares with it: the QGIS folder algorithm
(``FORMATS``: QGIS never imports napari_sam3) and ``napari.yaml``'s vector reader patterns.

Adding a format: a row here and its branch in the writer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FORMAT_SUFFIXES",
    "LABEL_SUFFIXES",
    "NAPARI_VECTOR_INPUTS",
    "OUTPUT_FORMATS",
    "OUTPUT_SUFFIXES",
    "VECTOR_FORMATS",
    "VECTOR_INPUTS",
    "OutputFormat",
    "read_vector_file",
    "vector_file_filter",
]


@dataclass(frozen=True)
class OutputFormat:
    """One output format: its ``--format`` name, file suffixes (the first is what a folder run
    names its files), the GDAL driver that writes it and the name people know it by."""

    name: str
    suffixes: tuple[str, ...]
    driver: str
    label: str
    vector: bool  # polygons with attributes; else a label raster

    @property
    def suffix(self) -> str:
        return self.suffixes[0]


# "Parquet" is written by geopandas.to_parquet (GeoParquet, with pyarrow), the others by GDAL.
OUTPUT_FORMATS: dict[str, OutputFormat] = {
    f.name: f
    for f in (
        OutputFormat("gpkg", (".gpkg",), "GPKG", "GeoPackage", True),
        OutputFormat("geojson", (".geojson",), "GeoJSON", "GeoJSON", True),
        OutputFormat("shp", (".shp",), "ESRI Shapefile", "Shapefile", True),
        OutputFormat("parquet", (".parquet",), "Parquet", "GeoParquet", True),
        OutputFormat("fgb", (".fgb",), "FlatGeobuf", "FlatGeobuf", True),
        OutputFormat("tif", (".tif", ".tiff"), "GTiff", "label GeoTIFF", False),
        OutputFormat("cog", (".tif", ".tiff"), "COG", "label Cloud-Optimised GeoTIFF", False),
    )
}
# `--format` name -> the suffix of a folder run's files
FORMAT_SUFFIXES = {name: f.suffix for name, f in OUTPUT_FORMATS.items()}
# vector suffix -> its driver
VECTOR_FORMATS = {s: f.driver for f in OUTPUT_FORMATS.values() if f.vector for s in f.suffixes}
LABEL_SUFFIXES = tuple(
    dict.fromkeys(s for f in OUTPUT_FORMATS.values() if not f.vector for s in f.suffixes)
)
OUTPUT_SUFFIXES = (*VECTOR_FORMATS, *LABEL_SUFFIXES)

# What is read as a vector file (exemplars, an area of interest): every vector format written,
# and GeoJSON under its generic suffix.
VECTOR_INPUTS = (*VECTOR_FORMATS, ".json")
# napari's vector reader: not .json, which napari opens with the raster reader (a STAC item).
NAPARI_VECTOR_INPUTS = tuple(s for s in VECTOR_INPUTS if s != ".json")


def vector_file_filter() -> str:
    """A Qt file dialog's filter offering every vector format, e.g. ``GeoPackage (*.gpkg);;...``."""
    return ";;".join(
        f"{f.label} ({' '.join('*' + s for s in f.suffixes)})"
        for f in OUTPUT_FORMATS.values()
        if f.vector
    )


def read_vector_file(path: str | os.PathLike):
    """A vector input as a GeoDataFrame: GeoParquet with pyarrow, the others with pyogrio."""
    import geopandas as gpd

    if VECTOR_FORMATS.get(Path(path).suffix.lower()) == "Parquet":
        return gpd.read_parquet(path)
    return gpd.read_file(path, engine="pyogrio")

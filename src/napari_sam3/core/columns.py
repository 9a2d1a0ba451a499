"""The columns of the result tables, one list per table: the producers build them, the readers
and tests name them from here."""

from __future__ import annotations

__all__ = [
    "FEATURE_COLUMNS",
    "POLYGON_COLUMNS",
    "PROVENANCE_COLUMNS",
    "RESULT_COLUMNS",
    "SCENE_COLUMNS",
]

# Sam3Client.segment / multi (client/results.py): one row per detection, best first
RESULT_COLUMNS = ["box", "score", "mask", "keyword", "prompt_kind"]
# segment_scene (scene/run.py): the tile it came from, how many tiles' parts it joins, the raster
SCENE_COLUMNS = [*RESULT_COLUMNS, "tile", "merged", "source", "gsd"]
# add_provenance (gis/vector.py): the model, carried into every output
PROVENANCE_COLUMNS = ["model_id", "random_weights", "checkpoint"]
# to_geodataframe (gis/vector.py): these first, then every other scalar column, then geometry
POLYGON_COLUMNS = [
    "label_id",
    "score",
    "keyword",
    "prompt_kind",
    "source",
    "tile",
    "area_px",
    "area_m2",
]
# a napari result layer's features (plugin/widgets/_layers.py), in the results table's order
FEATURE_COLUMNS = ["index", "keyword", "score", "area", "prompt_kind", "source"]

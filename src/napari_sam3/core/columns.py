"""The columns of the result tables, one list per table: the producers build them, the readers
and tests name them from here."""

from __future__ import annotations

__all__ = [
    "BASEMAP_COLUMNS",
    "CHANGE_COLUMNS",
    "FEATURE_COLUMNS",
    "HISTORY_COLUMNS",
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
# add_provenance too, for a scene read from a basemap service (imagery/basemap.py): the service
# (its URL template or endpoint) and its attribution, which the service's terms usually require
BASEMAP_COLUMNS = ["service", "attribution"]
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
# compare (change/classify.py): one row per object of two dates, then geometry (after; before
# for gone) and before_geometry (written as before_wkt)
CHANGE_COLUMNS = [
    "change",
    "reason",
    "keyword",
    "iou",
    "before_score",
    "after_score",
    "before_area_m2",
    "after_area_m2",
    "before_ids",
    "after_ids",
    "before_source",
    "after_source",
]
# change_between (change/run.py): which pair of dates a row compares, and the object's track
# over every date (the classes of its steps, in order)
HISTORY_COLUMNS = ["step", "before_date", "after_date", "track", "history"]

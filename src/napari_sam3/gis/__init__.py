"""GIS out: polygons with provenance and their writers, COCO, vector post-processing, overlays, atomic files."""

"""Whole scenes: tiled inference over any raster, results in scene pixels, GIS layers out.

A scene (a Sentinel-2 tile is 10980 x 10980 pixels; the model sees S x S) is cut into
overlapping tiles (:func:`tile_grid`) that are read one at a time with windowed reads, stretched
with ONE set of limits computed for the whole scene (:func:`~napari_sam3.imagery.stretch.scene_stretch`,
a decimated read) and sent to the client, which letterboxes each tile into the model input (a tile
larger than S is downsampled). All keywords of a tile share one vision pass (``client.multi``).

Every detection is mapped to scene pixels and kept as a :class:`SceneMask`: the run-length code
of its bounding-box crop plus the crop's offset, never a dense scene-sized array. Memory thus
grows with the tiles in flight (``in_flight`` model requests plus two read ahead) and the
detections' own size, not with the scene, within one memory budget
(:mod:`~napari_sam3.scene.budget`: the tiles in flight and the queries per request it leaves
room for, and the tiles' features it lets the cache keep); GDAL's block cache is capped at ``GDAL_CACHE_BYTES``
while the scene is read.

Across tiles, in this order:

1. **Seam merge.** A detection whose mask touches an inner edge of its tile (an edge that is not
   the scene's border) may be a piece of an object cut by that tile. Two detections of the same
   keyword from different tiles, at least one of them cut, are joined when their masks agree where
   both tiles see the scene: inside the tiles' shared region (their overlap), the IoU of the two
   masks is at least ``seam_iou``; for tiles that only abut (``overlap=0``), the same test
   compares the pixel rows/columns on either side of the seam. Joined detections (transitively)
   become one object: the union of the masks and boxes, the **maximum** score, and the tile and
   prompt kind of the best-scoring piece; ``merged`` counts the pieces.
2. **Deduplication.** Greedy by descending score, as :func:`~napari_sam3.masks.dedup.dedup_masks`:
   a detection is dropped when ``|A & B| / min(|A|, |B|) >= dedup`` for an already kept detection
   of the same keyword (the same object seen by two overlapping tiles, or nested in one).
   Pairs from one tile were deduplicated by the client already and are not compared again.

A run may cover only the tiles touching an area of interest (``aoi=``, :mod:`~napari_sam3.scene.aoi`)
and may tile a resampled grid of ``gsd`` metres (:func:`~napari_sam3.imagery.raster.ground_grid`);
the merge below then works in that grid's pixels.

What to look for is one :class:`~napari_sam3.prompts.query.Query`; how the scene is read and run,
one :class:`~napari_sam3.scene.settings.SceneSettings`; :func:`~napari_sam3.scene.driver.segment_to_file`
is the one driver from a scene to its file (the CLI, batch tasks and the QGIS worker use it).

Invalid pixels (:mod:`~napari_sam3.imagery.validity`: the dataset mask, nodata in every band,
NaN, unflagged fill) reach the model as 0. Tiles that are all invalid skip the model; a
detection lying mostly (more than half its pixels) on invalid pixels is dropped, and the others
lose their invalid pixels.
"""

from __future__ import annotations

from napari_sam3.core.columns import SCENE_COLUMNS
from napari_sam3.scene.aoi import Bbox
from napari_sam3.scene.driver import SceneOutcome, segment_to_file, segment_with_provenance
from napari_sam3.scene.masks import SceneMask
from napari_sam3.scene.output import scene_geodataframe, scene_labels, write_scene
from napari_sam3.scene.run import PHASES, default_in_flight, segment_scene
from napari_sam3.scene.settings import SceneSettings
from napari_sam3.scene.tiles import GDAL_CACHE_BYTES, Tile, tile_grid

__all__ = [
    "Bbox",
    "GDAL_CACHE_BYTES",
    "PHASES",
    "SCENE_COLUMNS",
    "SceneMask",
    "SceneOutcome",
    "SceneSettings",
    "default_in_flight",
    "Tile",
    "scene_geodataframe",
    "scene_labels",
    "segment_scene",
    "segment_to_file",
    "segment_with_provenance",
    "tile_grid",
    "write_scene",
]

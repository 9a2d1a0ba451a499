"""A scene's detections -> the GIS outputs: polygons on small windows, a label raster, files."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import rasterio
from rasterio.transform import Affine

from napari_sam3.core.errors import InvalidInput, InvalidType, OutputExists
from napari_sam3.imagery.raster import RasterInfo, raster_info
from napari_sam3.imagery.stac import is_stac
from napari_sam3.masks.paint import paint_frame
from napari_sam3.scene.masks import SceneMask
from napari_sam3.scene.tiles import GDAL_CACHE_BYTES

if TYPE_CHECKING:
    import geopandas as gpd

__all__ = ["OutputIsInput", "refuse_inputs", "scene_geodataframe", "scene_labels", "write_scene"]

PathLike = str | os.PathLike
# scene_geodataframe polygonizes up to _GROUP detections per to_geodataframe call, on a window of
# at most 2 x 2 cells: at most 32 MiB of temporary dense masks.
_GROUP = 32
_CELL = 512


class OutputIsInput(OutputExists):
    """An output path that is one of the run's inputs: never written, whatever overwrite says."""


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths are one file: the same real path (symlinks resolved), or for files
    that exist, the same inode (a hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def refuse_inputs(outputs: Iterable[PathLike], inputs: dict[str, Iterable[PathLike]]) -> None:
    """Refuse before anything runs when an output is one of the inputs.

    ``inputs`` maps what they are ("raster", "exemplar file", "concept") to their paths. The
    comparison is on real paths (symlinks resolved) and inodes (hard links), so no spelling of
    a path writes over an input; ``overwrite`` never changes that.
    """
    named = [(kind, Path(p)) for kind, paths in inputs.items() for p in paths]
    for out in outputs:
        for kind, source in named:
            if _same_file(Path(out), source):
                raise OutputIsInput(
                    f"the output {out} is the input {kind} {source}; an input is never written "
                    "over (whatever overwrite says): choose another output file or folder"
                )


def _scene_info(
    df: pd.DataFrame, raster: PathLike | Sequence[PathLike] | RasterInfo | None
) -> RasterInfo:
    scene = df.attrs.get("scene") or {}
    if raster is None or (is_stac(raster) and scene.get("path")):
        # a STAC item: the assets it was segmented from
        if not scene:
            raise InvalidInput(
                "the DataFrame does not say which raster it came from; pass raster= (the scene's "
                "path or RasterInfo)"
            )
        raster = scene["path"]
    # A scene segmented at a chosen gsd has its masks on that grid.
    info = raster if isinstance(raster, RasterInfo) else raster_info(raster, gsd=scene.get("gsd"))
    if len(df):
        shape = df["mask"].iloc[0].shape
        if tuple(shape) != (info.rows, info.cols):
            raise InvalidInput(
                f"the masks are {shape[0]}x{shape[1]} pixels but the raster is "
                f"{info.rows}x{info.cols}; pass the raster the scene was segmented from"
            )
    return info


def _check_scene_masks(df: pd.DataFrame) -> None:
    bad = [i for i, m in enumerate(df["mask"]) if not isinstance(m, SceneMask)]
    if bad:
        raise InvalidType(
            f"rows {bad[:5]} do not hold SceneMask masks; scene_geodataframe takes the result of "
            "segment_scene (for client results use gis.to_geodataframe)"
        )


def _groups(boxes: np.ndarray) -> Iterable[np.ndarray]:
    """Row indices in groups polygonized together: small detections near one another, at most
    _GROUP a time within a window of 2 x 2 cells; a larger detection alone, on its own crop."""
    keys: dict[tuple[int, int] | int, list[int]] = {}
    for i, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
        gy, gx = y1 // _CELL, x1 // _CELL
        fits = y2 <= (gy + 2) * _CELL and x2 <= (gx + 2) * _CELL
        keys.setdefault((gy, gx) if fits else -1 - i, []).append(i)
    for members in keys.values():
        for k in range(0, len(members), _GROUP):
            yield np.array(members[k : k + _GROUP])


def scene_geodataframe(
    df: pd.DataFrame,
    raster: PathLike | Sequence[PathLike] | RasterInfo | None = None,
    simplify: float = 0.0,
) -> gpd.GeoDataFrame:
    """:func:`~napari_sam3.gis.vector.to_geodataframe` for :func:`segment_scene` results.

    Polygons in the raster's CRS (pixel coordinates, with a UserWarning, when it has none), with
    ``label_id`` (the id in :func:`scene_labels`), ``score``, ``keyword``, ``prompt_kind``,
    ``source``, ``area_px``, ``tile``, ``merged``. ``raster`` defaults to the scene the
    DataFrame came from. No mask is made scene-sized: nearby detections are polygonized together
    on a small window of the scene.
    """
    import geopandas as gpd

    from napari_sam3.gis.vector import to_geodataframe

    if "mask" not in df.columns:
        raise InvalidInput(f"scene_geodataframe needs a 'mask' column; got {list(df.columns)}")
    _check_scene_masks(df)
    info = _scene_info(df, raster)
    table = df.reset_index(drop=True)
    if not len(table):
        return to_geodataframe(table, info)
    boxes = np.array([m.bbox for m in table["mask"]], dtype=np.int64)
    parts, order = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in _groups(boxes):
            x1, y1 = boxes[rows, :2].min(axis=0)
            x2, y2 = boxes[rows, 2:].max(axis=0)
            sub = table.iloc[rows].copy()
            sub["mask"] = [m.window(y1, x1, y2, x2) for m in sub["mask"]]
            window = dataclasses.replace(
                info,
                shape=(info.count, int(y2 - y1), int(x2 - x1)),
                transform=info.transform @ Affine.translation(int(x1), int(y1)),
            )
            parts.append(to_geodataframe(sub, window, simplify=simplify))
            order.append(rows)
    for message in {str(w.message): w for w in caught}.values():
        warnings.warn(message.message, message.category, stacklevel=2)
    gdf = pd.concat(parts, ignore_index=True)
    gdf.index = np.concatenate(order)
    gdf = gdf.sort_index().reset_index(drop=True)
    gdf["label_id"] = np.arange(1, len(gdf) + 1, dtype=np.int32)
    return gpd.GeoDataFrame(gdf, geometry="geometry", crs=parts[0].crs)


def scene_labels(df: pd.DataFrame, shape: tuple[int, int] | None = None) -> np.ndarray:
    """int32 label image of the scene: row ``i`` gets id ``i + 1`` (as ``label_id``), 0 is none.

    Where masks overlap the higher score wins; among equal scores the earlier row (as
    :func:`~napari_sam3.gis.vector.masks_to_labels`).
    """
    _check_scene_masks(df)
    if shape is None and not len(df):
        raise InvalidInput("the DataFrame is empty, so the scene's shape is unknown; pass shape=")
    return paint_frame(df, shape, "scene_labels")[0]


def write_scene(
    df: pd.DataFrame,
    path: PathLike,
    raster: PathLike | Sequence[PathLike] | RasterInfo | None = None,
    overwrite: bool = False,
    simplify: float = 0.0,
    cog: bool = False,
    postprocess=None,
) -> Path:
    """Write a :func:`segment_scene` result, atomically, by the file's extension.

    A vector suffix of :data:`~napari_sam3.core.formats.VECTOR_FORMATS`: polygons
    (:func:`scene_geodataframe`, then :func:`~napari_sam3.gis.vector.write_vector`). ``.tif`` /
    ``.tiff``: an int32 label GeoTIFF on the
    source's grid (:func:`scene_labels`, then :func:`~napari_sam3.gis.vector.write_labels_geotiff`;
    the label image takes rows x cols x 4 bytes; ``cog``: a Cloud-Optimised GeoTIFF). An
    existing file is refused unless ``overwrite``. ``postprocess``: a
    :class:`~napari_sam3.gis.post.PostProcess` applied to the polygons (vector formats only).
    """
    from napari_sam3.core.formats import LABEL_SUFFIXES, VECTOR_FORMATS
    from napari_sam3.gis.vector import write_labels_geotiff, write_vector

    path = Path(path)
    suffix = path.suffix.lower()
    source = raster if raster is not None else (df.attrs.get("scene") or {}).get("path")
    source = source.path if isinstance(source, RasterInfo) else source
    sources = [source] if isinstance(source, str | os.PathLike) else list(source or ())
    refuse_inputs([path], {"raster": [p for p in sources if isinstance(p, str | os.PathLike)]})
    if suffix in VECTOR_FORMATS:
        gdf = scene_geodataframe(df, raster, simplify)
        if postprocess is not None:
            from napari_sam3.gis.post import postprocess as apply

            gdf = apply(gdf, postprocess)
        return write_vector(gdf, path, overwrite=overwrite)
    if suffix in LABEL_SUFFIXES:
        info = _scene_info(df, raster)
        labels = scene_labels(df, (info.rows, info.cols))
        with rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_BYTES):
            return write_labels_geotiff(labels, path, info, overwrite=overwrite, cog=cog)
    raise InvalidInput(
        f"cannot write {path.name!r}: use {', '.join(VECTOR_FORMATS)} (polygons) or "
        f"{', '.join(LABEL_SUFFIXES)} (label raster)"
    )

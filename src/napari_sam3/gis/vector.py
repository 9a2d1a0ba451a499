"""Detections -> the GIS outputs: label images, georeferenced polygons, and the files analysts use:
GeoPackage, GeoJSON, Shapefile, GeoParquet, FlatGeobuf (vectors), GeoTIFF and Cloud-Optimised
GeoTIFF (labels). COCO instance files are written by :mod:`napari_sam3.gis.coco`.

The overlay renderer lives in :mod:`napari_sam3.gis.overlay` (``overlay_image`` and ``overlay_png``
are re-exported here).

Every function takes the result DataFrame of :class:`~napari_sam3.client.sam3.Sam3Client` (one row per
detection; see :mod:`napari_sam3.client.results`). The ``mask`` column may hold any
mask of :mod:`napari_sam3.masks.protocol` (``FrameMask``, ``RleMask``, ``SceneMask``, ``LabelMask``)
or plain 2-D bool (or 0/1 integer) numpy arrays, all in the original image's pixels.

Conventions:

- **Label ids** are ``1..N`` by row *position* (id ``k`` is ``df.iloc[k - 1]``); 0 is background.
  Where masks overlap, the row with the higher ``score`` wins; among equal scores (or without a
  ``score`` column) the earlier row wins, as results come best-first.
- **Polygons** follow pixel edges exactly (GDAL's polygonize on each mask's bounding-box crop,
  4-connected) and are mapped to map coordinates through the raster's affine transform. Every
  detection becomes one MultiPolygon (an empty one for an empty mask), so a layer has one type.
- **Writers** are atomic: they write to a temporary name in the target's folder and rename it onto
  the target only when the write succeeded, so a failed write leaves nothing behind (and an existing
  file untouched). An existing target is refused unless ``overwrite=True``.
"""

from __future__ import annotations

import datetime
import itertools
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import pyogrio
import pyproj
import rasterio
import rasterio.crs
import rasterio.errors
import rasterio.features
import rasterio.windows
import shapely
from rasterio.shutil import copy as rio_copy
from rasterio.transform import Affine
from shapely.geometry import MultiPolygon

from napari_sam3.core.columns import BASEMAP_COLUMNS, POLYGON_COLUMNS, SCENE_COLUMNS
from napari_sam3.core.errors import InvalidInput, InvalidType, MissingFile, OutputExists
from napari_sam3.core.files import atomic_path, disk_errors
from napari_sam3.core.formats import LABEL_SUFFIXES, OUTPUT_FORMATS, VECTOR_FORMATS
from napari_sam3.gis.overlay import overlay_image, overlay_png
from napari_sam3.imagery.raster import Raster, RasterInfo, raster_info
from napari_sam3.masks.paint import paint_frame
from napari_sam3.masks.protocol import Mask, frame_masks

__all__ = [
    "GEOPACKAGE_LAYER",
    "add_provenance",
    "masks_to_labels",
    "overlay_image",
    "overlay_png",
    "to_geodataframe",
    "write_labels_geotiff",
    "write_vector",
]

GEOPACKAGE_LAYER = "detections"
# A Shapefile's field names hold at most 10 characters: ours get these names there.
SHAPEFILE_FIELDS = {
    "prompt_kind": "prompt",
    "random_weights": "random_w",
    "checkpoint": "checkpt",
}
_SHAPEFILE_SIDECARS = (".shp", ".shx", ".dbf", ".prj", ".cpg")
# Columns to_geodataframe derives itself; a DataFrame column of the same name would be ambiguous.
_COMPUTED = (*(c for c in POLYGON_COLUMNS if c not in SCENE_COLUMNS), "geometry")
_NOT_ATTRIBUTES = {"box", "mask", *POLYGON_COLUMNS, *_COMPUTED}
_SCALARS = (str, int, float, bool, np.generic, datetime.date, type(None))

RasterLike = Raster | RasterInfo | str | os.PathLike


# ----------------------------------------------------------------------------- label images


def masks_to_labels(df: pd.DataFrame, shape: tuple[int, int] | None = None) -> np.ndarray:
    """Paint the detections into one int32 ``(rows, cols)`` label image of the original pixels.

    Row ``i`` (by position) gets id ``i + 1``; background is 0. Where masks overlap, the higher
    ``score`` is painted last and wins; among equal scores (or without a ``score`` column) the
    earlier row wins. ``shape`` defaults to the masks' own shape; it is required for an empty
    DataFrame.
    """
    return paint_frame(df, shape, "masks_to_labels")[0]


# ----------------------------------------------------------------------------- polygons


def to_geodataframe(
    df: pd.DataFrame,
    raster: RasterLike | None = None,
    crs: Any = None,
    transform: Affine | None = None,
    source: str | os.PathLike | None = None,
    simplify: float = 0.0,
) -> gpd.GeoDataFrame:
    """One MultiPolygon per detection, in the raster's CRS.

    Args:
        df: result DataFrame (a ``mask`` column; ``score``, ``keyword``, ``prompt_kind`` optional).
        raster: where the masks' pixels come from: a :class:`~napari_sam3.imagery.raster.Raster` (a
            windowed or decimated read carries its own transform), a
            :class:`~napari_sam3.imagery.raster.RasterInfo`, or a raster file's path (its whole grid).
            Its rows and columns must match the masks'.
        crs, transform: override the raster's CRS (anything pyproj accepts, e.g. ``"EPSG:32633"``)
            and affine transform (a :class:`rasterio.Affine` mapping (col, row) to map x, y).
        source: recorded in the ``source`` column (a path is reduced to its file name); default:
            the DataFrame's own ``source`` column, else the raster's file name(s).
        simplify: Douglas-Peucker tolerance in *pixels* (0 keeps the exact pixel edges); applied
            before the affine transform, topology preserved.

    Returns:
        Columns ``label_id`` (the id in :func:`masks_to_labels`), ``score``, ``keyword`` (the
        keyword or concept name), ``prompt_kind``, ``source``, ``tile`` (the scene tile it came
        from; -1 for a single image), ``area_px`` (mask pixel count), ``area_m2`` (square metres:
        in the CRS's own units when they are metres, else on the local UTM zone; NaN without a
        CRS), every other column of ``df`` whose values are all scalars (e.g. ``iou``, and the
        ``model_id`` / ``random_weights`` of :func:`add_provenance`), and ``geometry``. The ``box`` and
        ``mask`` columns are not carried. Without a CRS the polygons are in pixel coordinates
        (x = column, y = row) and a UserWarning says so.
    """
    if "mask" not in df.columns:
        raise InvalidInput(
            f"to_geodataframe needs a 'mask' column; the DataFrame has {list(df.columns)}."
        )
    clash = [c for c in _COMPUTED if c in df.columns]
    if clash:
        raise InvalidInput(
            f"the DataFrame has column(s) {clash}, which to_geodataframe computes itself; "
            "rename or drop them first."
        )
    simplify = float(simplify)
    if not np.isfinite(simplify) or simplify < 0:
        raise InvalidInput(f"simplify is a tolerance in pixels >= 0, got {simplify}.")

    out_crs, affine, raster_shape, raster_source = _georeference(raster, crs, transform)
    n = len(df)
    crops = [m.crop() for m in _masks(df, raster_shape)] if n else []

    geometries = []
    areas = np.zeros(n, dtype=np.int64)
    for i, (r0, c0, crop) in enumerate(crops):
        areas[i] = int(np.count_nonzero(crop))
        geometries.append(_polygonize(crop, r0, c0, simplify))
    geometry = gpd.GeoSeries(geometries, crs=out_crs)
    if n and affine != Affine.identity():
        geometry = geometry.affine_transform(
            [affine.a, affine.b, affine.d, affine.e, affine.c, affine.f]
        )

    if source is not None:
        sources = np.full(n, _file_name(source), dtype=object)
    elif "source" in df.columns:
        sources = df["source"].to_numpy(dtype=object)
    else:
        sources = np.full(n, raster_source, dtype=object)
    columns: dict[str, np.ndarray] = {
        "label_id": np.arange(1, n + 1, dtype=np.int32),
        "score": _column(df, "score", np.float32),
        "keyword": _column(df, "keyword", object),
        "prompt_kind": _column(df, "prompt_kind", object),
        "source": sources,
        "tile": _tiles(df),
        "area_px": areas,
        "area_m2": _area_m2(geometry, out_crs),
    }
    for name in df.columns:
        if name not in _NOT_ATTRIBUTES and _is_scalar_column(df[name]):
            columns[name] = df[name].to_numpy()
    if out_crs is None:
        warnings.warn(_no_crs_message(raster, affine), UserWarning, stacklevel=2)
    return gpd.GeoDataFrame(columns, geometry=geometry.reset_index(drop=True), crs=out_crs)


def add_provenance(df: pd.DataFrame, manifest: Any) -> pd.DataFrame:
    """``df`` with the model's ``model_id``, ``random_weights`` and ``checkpoint`` as columns
    (from a :class:`~napari_sam3.core.contract.Manifest` or a client), carried into every output;
    for a scene read from a basemap (``df.attrs["scene"]["path"]``), the service and its
    attribution too (:data:`~napari_sam3.core.columns.BASEMAP_COLUMNS`)."""
    from napari_sam3.imagery.basemap import basemap_metadata

    manifest = getattr(manifest, "manifest", manifest)
    out = df.copy()
    out["model_id"] = str(manifest.model_id)
    out["random_weights"] = bool(manifest.random_weights)
    out["checkpoint"] = manifest.checkpoint or ""
    basemap = basemap_metadata(df.attrs.get("scene", {}).get("path"))
    if basemap is not None:
        for column in BASEMAP_COLUMNS:
            out[column] = basemap[column]
    return out


def _tiles(df: pd.DataFrame) -> np.ndarray:
    if "tile" not in df.columns:
        return np.full(len(df), -1, dtype=np.int32)
    return pd.to_numeric(df["tile"], errors="coerce").fillna(-1).to_numpy(dtype=np.int32)


def _area_m2(geometry: gpd.GeoSeries, crs: pyproj.CRS | None) -> np.ndarray:
    if crs is None or not len(geometry):
        return np.full(len(geometry), np.nan)
    units = {a.unit_name for a in crs.axis_info}
    if crs.is_projected and units <= {"metre", "meter"}:
        return geometry.area.to_numpy(dtype=np.float64)
    try:  # geographic or non-metre units: measure on the local UTM zone
        return geometry.to_crs(local_utm(geometry)).area.to_numpy(dtype=np.float64)
    except (RuntimeError, ValueError, IndexError, pyproj.exceptions.CRSError):
        return np.full(len(geometry), np.nan)


def local_utm(geometry: gpd.GeoSeries) -> pyproj.CRS:
    """The UTM zone at the geometries' centre (IndexError where none: the poles). Longitudes past
    180 (a raster written in 0..360) are taken round to -180..180 first: geopandas'
    estimate_utm_crs finds no zone for them."""
    from pyproj.aoi import AreaOfInterest
    from pyproj.database import query_utm_crs_info

    lonlat = geometry if geometry.crs.is_geographic else geometry.to_crs(4326)
    west, south, east, north = (float(v) for v in lonlat.total_bounds)
    lon, lat = ((west + east) / 2 + 180.0) % 360.0 - 180.0, (south + north) / 2
    zones = query_utm_crs_info(
        datum_name="WGS 84", area_of_interest=AreaOfInterest(lon, lat, lon, lat)
    )
    return pyproj.CRS.from_epsg(zones[0].code)


def _masks(df: pd.DataFrame, shape: tuple[int, int] | None) -> list[Mask]:
    if "mask" not in df.columns:
        raise InvalidInput(
            f"to_geodataframe needs a 'mask' column; the DataFrame has {list(df.columns)}."
        )
    return frame_masks(df["mask"], shape, "to_geodataframe")[0]


def _polygonize(crop: np.ndarray, r0: int, c0: int, simplify: float) -> MultiPolygon:
    if crop.size == 0 or not crop.any():
        return MultiPolygon()
    pixels = np.ascontiguousarray(crop, dtype=np.uint8)
    rings: list = []
    ring_ends, polygon_ends = [], []
    for geom, _ in rasterio.features.shapes(
        pixels, mask=crop, connectivity=4, transform=Affine.translation(c0, r0)
    ):
        for ring in geom["coordinates"]:
            rings.extend(ring)
            ring_ends.append(len(rings))
        polygon_ends.append(len(ring_ends))
    # One array for all parts, built in C: shapely.geometry.shape part by part spent three
    # quarters of a speckled mask's time (1.1 of 1.5 s for 8,000 parts) in Python.
    geom = shapely.from_ragged_array(
        shapely.GeometryType.MULTIPOLYGON,
        np.fromiter(itertools.chain.from_iterable(rings), np.float64, 2 * len(rings)).reshape(
            -1, 2
        ),
        (
            np.array([0, *ring_ends], dtype=np.int64),
            np.array([0, *polygon_ends], dtype=np.int64),
            np.array([0, len(polygon_ends)], dtype=np.int64),
        ),
    )[0]
    if simplify > 0:
        geom = shapely.simplify(geom, simplify, preserve_topology=True)
        if geom.geom_type == "Polygon":
            geom = MultiPolygon([geom])
    return geom


def _georeference(
    raster: RasterLike | None, crs: Any, transform: Affine | None
) -> tuple[pyproj.CRS | None, Affine, tuple[int, int] | None, str | None]:
    """(CRS, transform, (rows, cols), source name) from the raster and the explicit overrides."""
    raster_crs, raster_transform, raster_shape, name = None, None, None, None
    if raster is not None:
        if isinstance(raster, str | os.PathLike):
            raster = raster_info(raster)
        if not isinstance(raster, Raster | RasterInfo):
            raise InvalidType(
                f"raster must be a Raster, a RasterInfo or a raster file's path, got "
                f"{type(raster).__name__}; for a bare CRS and transform pass crs= and transform=."
            )
        raster_crs, raster_transform = raster.crs, raster.transform
        raster_shape = tuple(int(v) for v in raster.shape[1:])
        name = _file_name(raster.path)
    if transform is not None and not isinstance(transform, Affine):
        raise InvalidType(
            f"transform must be a rasterio Affine, got {type(transform).__name__}; "
            "from a GDAL geotransform use rasterio.Affine.from_gdal(*geotransform)."
        )
    if crs is not None and transform is None and raster is None:
        raise InvalidInput(
            "crs was given without a transform, so pixel coordinates cannot be placed on the map; "
            "pass transform= (a rasterio Affine) or raster=."
        )
    chosen_crs = crs if crs is not None else raster_crs
    if isinstance(chosen_crs, rasterio.crs.CRS):
        epsg = chosen_crs.to_epsg()
        chosen_crs = f"EPSG:{epsg}" if epsg else chosen_crs.to_wkt()
    out_crs = None
    if chosen_crs is not None:
        try:
            out_crs = pyproj.CRS.from_user_input(chosen_crs)
        except pyproj.exceptions.CRSError as exc:
            raise InvalidInput(
                f"crs {chosen_crs!r} is not a CRS pyproj understands: {exc}"
            ) from exc
    affine = transform if transform is not None else raster_transform
    return out_crs, affine if affine is not None else Affine.identity(), raster_shape, name


def _no_crs_message(raster: Any, affine: Affine) -> str:
    what = "the raster has no CRS" if raster is not None else "no raster or crs was given"
    where = (
        "pixel coordinates (x = column, y = row from the top-left corner)"
        if affine == Affine.identity()
        else "the coordinates of the given transform"
    )
    return (
        f"{what}: the polygons are in {where} and have no CRS. To place them on the map, "
        "georeference the raster first (gdal_translate -a_srs EPSG:XXXX -a_ullr ULX ULY LRX LRY "
        "in.tif out.tif, or QGIS's Georeferencer) or, in Python, pass raster= (a georeferenced "
        "Raster) or crs= and transform=."
    )


def _file_name(path: Any) -> str:
    if isinstance(path, tuple | list):
        return "+".join(_file_name(p) for p in path)
    return Path(path).name if isinstance(path, os.PathLike) else Path(str(path)).name


def _column(df: pd.DataFrame, name: str, dtype: Any) -> np.ndarray:
    numeric = dtype is np.float32
    if name not in df.columns:
        return np.full(len(df), np.nan if numeric else None, dtype=dtype)
    column = pd.to_numeric(df[name], errors="coerce") if numeric else df[name]
    return column.to_numpy(dtype=dtype)


def _is_scalar_column(column: pd.Series) -> bool:
    if column.dtype != object:
        return not isinstance(column.dtype, pd.CategoricalDtype)
    return all(isinstance(v, _SCALARS) and np.ndim(v) == 0 for v in column)


# ----------------------------------------------------------------------------- writers


def write_vector(
    gdf: gpd.GeoDataFrame,
    path: str | os.PathLike,
    overwrite: bool = False,
    *,
    layer: str = GEOPACKAGE_LAYER,
) -> Path:
    """Write detections to a vector file by its extension, atomically.

    - ``.gpkg``: one layer named ``layer`` (``"detections"``) in the GeoDataFrame's CRS. With
      ``overwrite=True`` the whole file is replaced (other layers in it are not kept).
    - ``.shp``: an ESRI Shapefile (``.shp``, ``.shx``, ``.dbf``, ``.prj``, ``.cpg``) in the
      GeoDataFrame's CRS; field names longer than 10 characters are renamed
      (:data:`SHAPEFILE_FIELDS`), every sidecar is replaced together.
    - ``.parquet``: GeoParquet (geopandas + pyarrow), CRS as PROJJSON in the file's metadata.
    - ``.fgb``: FlatGeobuf with a spatial index, in the GeoDataFrame's CRS.
    - ``.geojson``: reprojected to EPSG:4326 (longitude, latitude), as RFC 7946 requires, with
      coordinates rounded to 7 decimals (about 1 cm). A GeoDataFrame without a CRS is written
      unprojected, with a UserWarning: readers will take its pixel coordinates for degrees.

    Raises:
        ValueError: an extension other than the supported ones.
        FileExistsError: ``path`` exists and ``overwrite`` is False.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in VECTOR_FORMATS:
        supported = ", ".join(
            f"{f.suffix} ({f.label})" for f in OUTPUT_FORMATS.values() if f.vector
        )
        raise InvalidInput(
            f"cannot write vectors to {path.name!r}: unsupported extension "
            f"{suffix or '(none)'}; supported: {supported}."
        )
    if not isinstance(gdf, gpd.GeoDataFrame):
        raise InvalidType(
            f"write_vector expects a GeoDataFrame, got {type(gdf).__name__}; "
            "make one with to_geodataframe(df, raster)."
        )
    driver = VECTOR_FORMATS[suffix]
    # The layer name also becomes GeoJSON's "name" member (else the temporary file's name).
    options: dict[str, Any] = {"layer": layer}
    if driver == "GeoJSON":
        if gdf.crs is None:
            warnings.warn(
                f"{path.name}: the GeoDataFrame has no CRS, so its coordinates (pixels) go into "
                "GeoJSON unprojected, where readers will take them for longitude/latitude; "
                "write a .gpkg, or georeference the detections with to_geodataframe(df, raster).",
                UserWarning,
                stacklevel=2,
            )
        else:
            gdf = gdf.to_crs(epsg=4326)
            options["layer_options"] = {"RFC7946": "YES"}
    gdf = sound_geometries(gdf, path.name)
    types = set(gdf.geometry.dropna().geom_type)
    if types <= {"Polygon", "MultiPolygon"}:
        options.update(geometry_type="MultiPolygon", promote_to_multi=True)
    frame = gdf.reset_index(drop=True)
    if driver == "Parquet":
        with atomic_path(path, overwrite) as tmp:
            frame.to_parquet(tmp, index=False)
        return path
    if driver == "ESRI Shapefile":
        return _write_shapefile(frame.rename(columns=SHAPEFILE_FIELDS), path, overwrite, options)
    with atomic_path(path, overwrite) as tmp, warnings.catch_warnings():
        # Our own warning above already covers a missing CRS.
        warnings.filterwarnings("ignore", message=".*'crs' was not provided.*")
        warnings.filterwarnings("ignore", message=".*No SRS set on layer.*")
        pyogrio.write_dataframe(frame, tmp, driver=driver, **options)
    return path


def sound_geometries(gdf: gpd.GeoDataFrame, name: str = "output") -> gpd.GeoDataFrame:
    """``gdf`` with only geometries a file may hold: invalid polygons repaired
    (``shapely.make_valid``, their polygonal part kept), and empty ones, ones with coordinates
    that are not finite (a reprojection outside the CRS's range) and ones left empty by repair
    dropped; a UserWarning counts each (no output receives a broken geometry silently)."""
    geoms = gdf.geometry
    if geoms.isna().all() or not len(gdf):
        return gdf
    arr = np.asarray(geoms.values, dtype=object)
    present = ~shapely.is_missing(arr)
    coords_ok = np.array(
        [g is None or bool(np.isfinite(shapely.get_coordinates(g)).all()) for g in arr]
    )
    invalid = present & coords_ok & ~shapely.is_empty(arr) & ~shapely.is_valid(arr)
    repaired = arr.copy()
    if invalid.any():
        repaired[invalid] = [_polygonal(g) for g in shapely.make_valid(arr[invalid])]
    keep = coords_ok & ~(present & shapely.is_empty(repaired))
    dropped = int((~keep).sum())
    fixed_count = int((invalid & keep).sum())
    if not dropped and not fixed_count:
        return gdf
    parts = []
    if fixed_count:
        parts.append(f"{fixed_count} invalid geometr{'y' if fixed_count == 1 else 'ies'} repaired")
    if dropped:
        parts.append(
            f"{dropped} dropped (empty, or with coordinates that are not finite: georeferencing "
            "outside its CRS's range?)"
        )
    warnings.warn(f"{name}: {'; '.join(parts)}", UserWarning, stacklevel=3)
    out = gdf.copy()
    out[out.geometry.name] = gpd.GeoSeries(repaired, index=gdf.index, crs=gdf.crs)
    return out[keep]


def _polygonal(geom: Any) -> Any:
    """The polygonal part of a repaired geometry (a collection may hold lines or points)."""
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    polygons = [g for g in getattr(geom, "geoms", ()) if g.geom_type in ("Polygon", "MultiPolygon")]
    return shapely.union_all(polygons) if polygons else shapely.Polygon()


def _write_shapefile(
    frame: gpd.GeoDataFrame, path: Path, overwrite: bool, options: dict[str, Any]
) -> Path:
    """All sidecars written in a temporary folder beside ``path``, then renamed together."""
    import shutil
    import tempfile

    targets = [path.with_suffix(s) for s in _SHAPEFILE_SIDECARS]
    existing = [t for t in targets if t.exists()]
    if existing and not overwrite:
        raise OutputExists(f"{existing[0]} exists; choose another name or pass overwrite=True")
    if not path.parent.exists():
        raise MissingFile(f"folder {path.parent} does not exist")
    options = {k: v for k, v in options.items() if k != "layer"}
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        with disk_errors(path, lambda: list(tmp_dir.iterdir())), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*'crs' was not provided.*")
            warnings.filterwarnings("ignore", message=".*No SRS set on layer.*")
            pyogrio.write_dataframe(
                frame, tmp_dir / path.name, driver="ESRI Shapefile", encoding="UTF-8", **options
            )
        for target in targets:
            written = tmp_dir / target.name
            if written.exists():
                os.replace(written, target)
            elif target.exists():
                target.unlink()  # e.g. a stale .prj of an older file with a CRS
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return path


def write_labels_geotiff(
    labels: np.ndarray | pd.DataFrame,
    path: str | os.PathLike,
    raster_or_profile: RasterLike | Mapping[str, Any],
    overwrite: bool = False,
    compress: str = "deflate",
    cog: bool = False,
) -> Path:
    """Write a label image as a single-band int32 GeoTIFF (nodata 0), atomically.

    ``cog=True`` writes a Cloud-Optimised GeoTIFF (GDAL's COG driver: 512-pixel tiles,
    compressed, nearest-neighbour overviews), so a web map or QGIS reads any zoom level with a
    few range requests. The labels are written in row strips to a tiled temporary GeoTIFF, which
    GDAL then copies into the COG layout.

    Args:
        labels: an integer ``(rows, cols)`` label image (e.g. :func:`masks_to_labels`; bool is
            written as 0/1), or a result DataFrame, painted with :func:`masks_to_labels`.
        path: a ``.tif`` / ``.tiff`` file name.
        raster_or_profile: the georeferencing of the labels' pixels: a
            :class:`~napari_sam3.imagery.raster.Raster` (for a windowed read, its window's transform is
            used), a :class:`~napari_sam3.imagery.raster.RasterInfo`, a raster file's path (its whole
            grid), or a rasterio profile with ``transform`` and ``crs`` (``height``/``width`` are
            checked when present; other keys are ignored).
        compress: ``"deflate"`` (default) or ``"lzw"``.

    Raises:
        ValueError: a wrong extension, labels not integer / not 2-D / not fitting int32, or a
            shape that does not match the raster's.
        FileExistsError: ``path`` exists and ``overwrite`` is False.
    """
    path = Path(path)
    if path.suffix.lower() not in LABEL_SUFFIXES:
        raise InvalidInput(
            f"write_labels_geotiff writes GeoTIFF; name the file {' or '.join(LABEL_SUFFIXES)}, "
            f"got {path.name!r}."
        )
    compress = str(compress).lower()
    if compress not in ("deflate", "lzw"):
        raise InvalidInput(f"compress must be 'deflate' or 'lzw', got {compress!r}.")
    crs, transform, shape_ = _tiff_georeference(raster_or_profile)
    if isinstance(labels, pd.DataFrame):
        labels = masks_to_labels(labels, shape_)
    arr = _as_labels(labels)
    if shape_ is not None and arr.shape != shape_:
        raise InvalidInput(
            f"labels of shape {arr.shape} do not match the raster's {shape_} (rows, cols); "
            "pass the Raster the detections were made on (for a window, that windowed read)."
        )
    if crs is None:
        warnings.warn(
            f"{path.name}: no CRS to write; the GeoTIFF carries only its transform.",
            UserWarning,
            stacklevel=2,
        )
    rows, cols = arr.shape
    profile: dict[str, Any] = {
        "driver": "GTiff",
        "height": rows,
        "width": cols,
        "count": 1,
        "dtype": "int32",
        "nodata": 0,
        "crs": crs,
        "transform": transform,
        "compress": compress,
        "predictor": 2,
        "BIGTIFF": "IF_SAFER",
    }
    if rows >= 256 and cols >= 256:
        profile.update(tiled=True, blockxsize=256, blockysize=256)
    with atomic_path(path, overwrite) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
        if not cog:
            with rasterio.open(tmp, "w", **profile) as dst:
                dst.write(arr, 1)
            return path
        staging = tmp.with_name(tmp.name + ".staging.tif")
        profile.update(tiled=True, blockxsize=512, blockysize=512, compress="deflate")
        try:
            with rasterio.open(staging, "w", **profile) as dst:
                for r0 in range(0, rows, 512):
                    window = rasterio.windows.Window(0, r0, cols, min(512, rows - r0))
                    dst.write(arr[r0 : r0 + 512], 1, window=window)
            rio_copy(
                staging,
                tmp,
                driver="COG",
                COMPRESS=compress.upper(),
                PREDICTOR="YES",
                BLOCKSIZE=512,
                OVERVIEWS="AUTO",
                RESAMPLING="NEAREST",
                BIGTIFF="IF_SAFER",
            )
        finally:
            staging.unlink(missing_ok=True)
    return path


def _tiff_georeference(
    source: RasterLike | Mapping[str, Any],
) -> tuple[Any, Affine, tuple[int, int] | None]:
    if isinstance(source, str | os.PathLike):
        source = raster_info(source)
    if isinstance(source, Raster | RasterInfo):
        return source.crs, source.transform, (int(source.shape[1]), int(source.shape[2]))
    if isinstance(source, Mapping):
        transform = source.get("transform")
        if not isinstance(transform, Affine):
            raise InvalidInput(
                "the profile has no 'transform' (a rasterio Affine); pass a rasterio profile "
                "such as dataset.profile, or the Raster itself."
            )
        size = (source.get("height"), source.get("width"))
        shape_ = (int(size[0]), int(size[1])) if None not in size else None
        return source.get("crs"), transform, shape_
    raise InvalidType(
        "raster_or_profile must be a Raster, a RasterInfo, a raster file's path or a rasterio "
        f"profile (dict), got {type(source).__name__}."
    )


def _as_labels(labels: Any) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 2:
        raise InvalidInput(f"labels must be a 2-D (rows, cols) image, got shape {arr.shape}.")
    if arr.dtype == np.bool_:
        return arr.astype(np.int32)
    if arr.dtype.kind not in "ui":
        raise InvalidInput(
            f"labels must be integers (ids, 0 = background), got {arr.dtype}; "
            "make them with masks_to_labels(df)."
        )
    info = np.iinfo(np.int32)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise InvalidInput("labels must fit in int32 (GeoTIFF is written as int32).")
    return arr.astype(np.int32, copy=False)

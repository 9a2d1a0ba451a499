"""napari reader and writers: georeferenced rasters in, georeferenced labels and polygons out.

World coordinates
    A layer read here is placed in **map units** of its CRS, so layers of the same CRS line up
    whatever their resolution (a 10 m and a 20 m Sentinel-2 band overlay exactly). napari's y axis
    points down the screen, so the world y coordinate is the **negated northing**: world
    ``(y, x) = (-northing, easting)`` of the pixel centre. North-up rasters get ``scale`` and
    ``translate``; rotated or sheared ones an ``affine``.

Layer metadata (plain JSON-friendly values, copied onto every result layer)
    ``crs``
        the CRS as text (``"EPSG:32633"`` or WKT), or None;
    ``transform``
        the rasterio affine ``[a, b, c, d, e, f]`` of **this layer's** pixels (a crop's own);
    ``band_names``
        the names of the raster's bands;
    ``source``
        the file (or list of files) read;
    ``sam3``
        the plugin's own record: ``version``; ``kind`` ("image" or "result"); ``world`` (the
        convention above); for images ``band``, ``band_index`` (1-based), ``stretch`` (the
        percentile limits the model's stretch uses for this band, also the contrast limits),
        ``stack`` (an id shared by the band layers of one raster) and ``rgb_bands`` (the bands
        the widgets send to the model by default); for results ``image_layer``, ``offset``
        (row, col of the layer's pixel 0 in the image the model saw) and ``prompt``.

The widgets map a layer's data coordinates to image pixels with napari's own transforms
(``data_to_world`` then the image layer's ``world_to_data``), so shapes and points drawn on any
layer, of any scale, reach the model in the right pixels.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_sam3.masks.protocol import Crop, LazyMask
from napari_sam3.masks.rle import RleMask

SUFFIXES = (".tif", ".tiff", ".jp2", ".j2k")
SAM3_KEY = "sam3"
METADATA_VERSION = 1
WORLD_CONVENTION = "(y, x) = (-northing, easting) of pixel centres, map units"
STRETCH_PERCENTILES = (2.0, 98.0)
# Sentinel-2 true colour, then the usual names of RGB bands in other products.
_RGB_NAME_SETS = (("B04", "B03", "B02"), ("red", "green", "blue"), ("r", "g", "b"))
_BAND_COLORMAPS = ("red", "green", "blue")
# Rasters at least this long on a side, or this large, open as lazy multiscale layers.
LAZY_SIDE = 4096
LAZY_BYTES = 64 * 2**20

LayerData = tuple[Any, dict[str, Any], str]


# ----------------------------------------------------------------------------- reader


def get_reader(path: str | Sequence[str]) -> Callable[[Any], list[LayerData]] | None:
    """npe2 reader hook: GeoTIFF / JPEG 2000 files (several files are stacked as bands).

    Only the file names are checked here (napari asks every reader, so this stays cheap); a file
    that turns out not to be a readable raster gets a notification naming it and why.
    """
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not paths or not all(Path(p).suffix.lower() in SUFFIXES for p in paths):
        return None
    return _read_or_notify


def _read_or_notify(path: str | Sequence[str]) -> list[LayerData]:
    """`read_layers` for napari: a file it cannot read becomes an error notification (no layers,
    no traceback) instead of an exception."""
    try:
        return read_layers(path)
    except (ValueError, OSError) as exc:
        from napari.utils.notifications import show_error

        show_error(f"napari-sam3 could not open {_paths_text(path)}: {exc}")
        return [(None,)]  # npe2's "read, nothing to show" sentinel


def read_layers(path: str | Sequence[str]) -> list[LayerData]:
    """Read one raster (or a stack of single-band files) into napari layer data tuples.

    Small rasters (:func:`is_small`) are read whole into numpy arrays; larger ones become
    multiscale layers whose levels are dask arrays of windowed reads (:mod:`napari_sam3.imagery.pyramid`),
    so opening a whole scene reads only a sample of its blocks.

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: a file is not a readable raster (or its sampled pixels are damaged).
    """
    from napari_sam3.imagery.raster import raster_info, read_raster

    if isinstance(path, str | os.PathLike):
        source = path
    else:
        paths = list(path)
        source = paths[0] if len(paths) == 1 else paths
    if is_small(raster_info(source)):
        return raster_layers(read_raster(source))
    from napari_sam3.imagery.pyramid import RasterPyramid

    return pyramid_layers(RasterPyramid(source))


def is_small(info) -> bool:
    """Whether a raster (a :class:`~napari_sam3.imagery.raster.RasterInfo`) is read whole: longest side
    under :data:`LAZY_SIDE` pixels and pixels under :data:`LAZY_BYTES`."""
    nbytes = info.count * info.rows * info.cols * np.dtype(info.dtype).itemsize
    return max(info.rows, info.cols) < LAZY_SIDE and nbytes < LAZY_BYTES


def raster_layers(
    raster, name: str | None = None, percentiles: tuple[float, float] = STRETCH_PERCENTILES
) -> list[LayerData]:
    """A :class:`~napari_sam3.imagery.raster.Raster` -> napari image layer data tuples.

    - uint8 with 3 bands: one RGB layer (the model takes it unchanged).
    - one band: one grayscale layer.
    - otherwise one layer per band, sharing a ``stack`` id; the RGB bands (B04, B03, B02 for
      Sentinel-2, else the first three) are visible with red, green and blue colormaps blended
      additively, the others hidden.

    Contrast limits are the percentile stretch of each band that :func:`~napari_sam3.imagery.stretch.
    to_model_rgb` applies for the model, so the screen shows what the model sees.
    """
    from napari_sam3.imagery.stretch import compute_stretch

    data = raster.data
    limits = []
    if not (data.dtype == np.uint8 and data.shape[0] == 3):
        for i in range(data.shape[0]):
            stats = compute_stretch(raster, bands=[i + 1], percentiles=percentiles)
            limits.append((stats.low[0], stats.high[0]))
    return _image_layers(
        raster,
        bands=list(data),
        rgb=lambda: np.moveaxis(data, 0, -1),
        limits=limits,
        name=name,
        percentiles=percentiles,
        multiscale=False,
    )


def pyramid_layers(
    pyramid, name: str | None = None, percentiles: tuple[float, float] = STRETCH_PERCENTILES
) -> list[LayerData]:
    """A :class:`~napari_sam3.imagery.pyramid.RasterPyramid` -> multiscale napari image layer data tuples,
    laid out, placed and described as :func:`raster_layers` does (``pixel_shape`` is level 0's).

    The contrast limits (and the model's stretch) are percentiles of
    :meth:`~napari_sam3.imagery.pyramid.RasterPyramid.sample`: the coarsest overview, or blocks spread
    over the scene when the file has no overviews. The stretch record says which (``sample``).
    """
    from napari_sam3.imagery.raster import Raster
    from napari_sam3.imagery.stretch import compute_stretch

    info = pyramid.info
    count = info.count
    bands = [pyramid.band_levels(b) for b in range(1, count + 1)]
    limits = []
    if not (np.dtype(info.dtype) == np.uint8 and count == 3):
        sample = pyramid.sample()
        raster = Raster(sample, info.crs, info.transform, info.nodata, info.band_names, info.path)
        for i in range(count):
            stats = compute_stretch(raster, bands=[i + 1], percentiles=percentiles)
            limits.append((stats.low[0], stats.high[0]))

    def rgb():
        import dask.array as da

        return [da.stack(levels, axis=-1) for levels in zip(*bands, strict=True)]

    return _image_layers(
        info,
        bands=bands,
        rgb=rgb,
        limits=limits,
        name=name,
        percentiles=percentiles,
        multiscale=True,
        sample=pyramid.sample_description(),
    )


def _image_layers(
    raster, bands, rgb, limits, name, percentiles, multiscale: bool, sample: str | None = None
) -> list[LayerData]:
    """The layer tuples of :func:`raster_layers` / :func:`pyramid_layers`: `raster` gives the
    georeferencing (a Raster or a RasterInfo), `bands` each band's data (an array, or a list of
    levels), `rgb()` the (rows, cols, 3) data of a uint8 RGB raster."""
    count = len(bands)
    dtype = np.dtype(raster.dtype)
    base = name or _base_name(raster.path)
    geo = transform_kwargs(raster.transform)
    names = list(raster.band_names)
    pixel_shape = [int(v) for v in raster.shape[1:]]
    extra_kwargs = {"multiscale": True} if multiscale else {}

    def metadata(extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "crs": crs_text(raster.crs),
            "transform": affine_list(raster.transform),
            "band_names": names,
            "source": _source_text(raster.path),
            "nodata": raster.nodata,
            SAM3_KEY: {
                "version": METADATA_VERSION,
                "kind": "image",
                "world": WORLD_CONVENTION,
                "pixel_shape": pixel_shape,
                **extra,
            },
        }

    def stretch(i: int) -> dict[str, Any]:
        record = _stretch_record(limits[i], percentiles)
        return {**record, "sample": sample} if sample else record

    if dtype == np.uint8 and count == 3:
        meta = metadata({"rgb_bands": names, "stretch": None})
        kwargs = {"name": base, "rgb": True, "metadata": meta, **extra_kwargs, **geo}
        return [(rgb(), kwargs, "image")]

    if count == 1:
        meta = metadata(
            {"band": names[0], "band_index": 1, "rgb_bands": names[:1], "stretch": stretch(0)}
        )
        kwargs = {
            "name": base,
            "contrast_limits": _display_limits(limits[0]),
            "colormap": "gray",
            "metadata": meta,
            **extra_kwargs,
            **geo,
        }
        return [(bands[0], kwargs, "image")]

    rgb_bands = default_rgb_bands(names)
    stack = uuid.uuid4().hex
    layers = []
    for i, band in enumerate(names):
        shown = band in rgb_bands
        meta = metadata(
            {
                "band": band,
                "band_index": i + 1,
                "stack": stack,
                "rgb_bands": rgb_bands,
                "stretch": stretch(i),
            }
        )
        colormap = (
            _BAND_COLORMAPS[rgb_bands.index(band)] if len(rgb_bands) == 3 and shown else "gray"
        )
        kwargs = {
            "name": f"{base} {band}",
            "contrast_limits": _display_limits(limits[i]),
            "colormap": colormap,
            "blending": "additive",
            "visible": shown,
            "metadata": meta,
            **extra_kwargs,
            **geo,
        }
        layers.append((bands[i], kwargs, "image"))
    return layers


def default_rgb_bands(names: Sequence[str]) -> list[str]:
    """The bands shown (and sent to the model) by default: true colour if the names tell it."""
    lower = [n.lower() for n in names]
    for wanted in _RGB_NAME_SETS:
        if all(w.lower() in lower for w in wanted):
            return [names[lower.index(w.lower())] for w in wanted]
    return list(names[:3]) if len(names) >= 3 else list(names[:1])


def _stretch_record(limits: tuple[float, float], percentiles) -> dict[str, Any]:
    return {"low": limits[0], "high": limits[1], "percentiles": [float(p) for p in percentiles]}


def _display_limits(limits: tuple[float, float]) -> tuple[float, float]:
    lo, hi = float(limits[0]), float(limits[1])
    if hi > lo:
        return lo, hi
    # A constant band: the model shows it mid-grey; napari needs low < high.
    return lo - 0.5, lo + 0.5


def _base_name(path) -> str:
    if isinstance(path, tuple | list):
        stems = [Path(p).stem for p in path]
        # the common leading words: T33UUU_20170216T102101_B04, ..._B03 -> T33UUU_20170216T102101
        words = os.path.commonprefix([s.split("_") for s in stems])
        return "_".join(words) or stems[0]
    return Path(path).stem


def _paths_text(path) -> str:
    if isinstance(path, str | os.PathLike):
        return str(path)
    return ", ".join(str(p) for p in path)


def _source_text(path) -> str | list[str]:
    if isinstance(path, tuple | list):
        return [str(p) for p in path]
    return str(path)


# ----------------------------------------------------------------------------- georeferencing


def crs_text(crs) -> str | None:
    """A CRS as text: ``EPSG:<code>`` when it has one, otherwise WKT; None stays None."""
    if crs is None:
        return None
    return crs.to_string()


def affine_list(transform) -> list[float]:
    return [float(v) for v in tuple(transform)[:6]]


def transform_kwargs(transform) -> dict[str, Any]:
    """napari layer placement for a rasterio affine (pixel corners -> map), world = (-N, E)."""
    a, b, c, d, e, f = affine_list(transform)
    if b == 0 and d == 0 and e < 0:
        return {"scale": (-e, a), "translate": (-(f + 0.5 * e), c + 0.5 * a)}
    # Rotated, sheared or south-up: the whole map as a (row, col) -> (-N, E) affine matrix.
    matrix = np.array(
        [
            [-e, -d, -(f + 0.5 * d + 0.5 * e)],
            [b, a, c + 0.5 * a + 0.5 * b],
            [0.0, 0.0, 1.0],
        ]
    )
    return {"affine": matrix}


def transform_from_layer(scale: Sequence[float], translate: Sequence[float]):
    """The rasterio affine of a north-up layer placed by `transform_kwargs` (last two axes)."""
    from rasterio.transform import Affine

    sy, sx = (float(v) for v in tuple(scale)[-2:])
    ty, tx = (float(v) for v in tuple(translate)[-2:])
    return Affine(sx, 0.0, tx - 0.5 * sx, 0.0, -sy, -ty + 0.5 * sy)


def georeferencing(metadata: dict[str, Any] | None) -> tuple[Any, Any]:
    """(rasterio CRS or None, rasterio Affine or None) recorded in a layer's metadata."""
    from rasterio.crs import CRS
    from rasterio.transform import Affine

    metadata = metadata or {}
    crs = metadata.get("crs")
    transform = metadata.get("transform")
    crs = CRS.from_user_input(crs) if crs else None
    if transform is not None:
        transform = Affine(*[float(v) for v in list(transform)[:6]])
    return crs, transform


def crop_metadata(metadata: dict[str, Any] | None, row0: int, col0: int) -> dict[str, Any]:
    """Metadata of a result layer whose pixel (0, 0) is pixel (row0, col0) of the image."""
    from rasterio.transform import Affine

    metadata = metadata or {}
    out = {k: v for k, v in metadata.items() if k in ("crs", "band_names", "source", "transform")}
    _, transform = georeferencing(metadata)
    if transform is not None:
        out["transform"] = affine_list(transform @ Affine.translation(col0, row0))
    return out


# ----------------------------------------------------------------------------- writers


def write_labels_geotiff(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """npe2 writer: a labels layer -> single-band int32 GeoTIFF with the source's georeferencing.

    napari's save dialog has already asked before replacing a file, so an existing file is
    overwritten.
    """
    from napari_sam3.gis import vector as gis

    labels = _labels_2d(data, attributes)
    crs, transform = _layer_georeferencing(attributes)
    written = gis.write_labels_geotiff(
        labels, path, {"crs": crs, "transform": transform}, overwrite=True
    )
    return [str(written)]


def write_instances_gpkg(path: str, data: Any, attributes: dict[str, Any]) -> list[str]:
    """npe2 writer: a labels layer -> GeoPackage, one (multi)polygon per label, with its
    ``score``, ``keyword`` and ``prompt_kind`` from the layer's features; ``label_id`` is the
    label's value in the layer (and in the GeoTIFF)."""
    from napari_sam3.gis import vector as gis

    labels = _labels_2d(data, attributes)
    crs, transform = _layer_georeferencing(attributes)
    frame = labels_frame(labels, attributes.get("features"))
    values = frame.pop("label").to_numpy()
    metadata = attributes.get("metadata") or {}
    source = metadata.get("source") or attributes.get("name") or None
    gdf = gis.to_geodataframe(frame, crs=crs, transform=transform, source=source)
    gdf["label_id"] = values.astype(np.int32)
    written = gis.write_vector(gdf, path, overwrite=True)
    return [str(written)]


def labels_frame(labels: np.ndarray, features=None):
    """One row per label present: ``label``, ``mask`` (a lazy full-frame mask, dense on
    ``np.asarray``), ``box`` (pixel edges), and the ``score``, ``keyword`` and ``prompt_kind`` of
    the layer's features table (matched on its ``index`` column, else row = label) where known."""
    import pandas as pd

    labels = np.asarray(labels)
    table = _features_by_label(features)
    rows = []
    for label, pixels in _label_pixels(labels):
        mask = LabelMask(labels.shape, pixels)
        info = table.get(label, {})
        rows.append(
            {
                "label": label,
                "box": mask.box,
                "score": float(info.get("score", math.nan)),
                "mask": mask,
                "keyword": str(info.get("keyword", "") or ""),
                "prompt_kind": str(info.get("prompt_kind", "") or ""),
            }
        )
    columns = ["label", "box", "score", "mask", "keyword", "prompt_kind"]
    frame = pd.DataFrame(rows, columns=columns)
    frame["score"] = frame["score"].astype(np.float32)
    return frame


class LabelMask(LazyMask):
    """One label of a label image: its pixels kept as sorted flat indices, dense on access."""

    __slots__ = ("_shape", "pixels")

    def __init__(self, shape: tuple[int, int], pixels: np.ndarray) -> None:
        self._shape = tuple(int(v) for v in shape)
        self.pixels = pixels

    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def area(self) -> int:
        return int(self.pixels.size)

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        if self.pixels.size == 0:
            return (0, 0, 0, 0)
        rows, cols = np.divmod(self.pixels, self._shape[1])
        return (int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1)

    @property
    def box(self) -> np.ndarray:
        return np.asarray(self.bbox, np.float32)

    def crop(self) -> Crop:
        x1, y1, x2, y2 = self.bbox
        rows, cols = np.divmod(self.pixels, self._shape[1])
        out = np.zeros((y2 - y1, x2 - x1), dtype=bool)
        out[rows - y1, cols - x1] = True
        return y1, x1, out

    def to_dense(self) -> np.ndarray:
        dense = np.zeros(self._shape, bool)
        dense.ravel()[self.pixels] = True
        return dense

    def to_rle(self) -> RleMask:
        pixels = self.pixels
        if pixels.size == 0:
            return RleMask.from_intervals(pixels, pixels, self._shape)
        # Sorted pixels: a run ends where the next pixel is not the following one.
        last = np.flatnonzero(np.diff(pixels) != 1)
        starts = pixels[np.r_[0, last + 1]]
        ends = pixels[np.r_[last, pixels.size - 1]] + 1
        return RleMask.from_intervals(starts, ends, self._shape)


def _label_pixels(labels: np.ndarray):
    """(label, flat pixel indices) for every non-zero label, in increasing label order."""
    flat = labels.ravel()
    where = np.flatnonzero(flat)
    if where.size == 0:
        return
    values = flat[where]
    order = np.argsort(values, kind="stable")
    values, where = values[order], where[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    ends = np.r_[starts[1:], values.size]
    for a, b in zip(starts, ends, strict=True):
        yield int(values[a]), where[a:b]


def _features_by_label(features) -> dict[int, dict[str, Any]]:
    import pandas as pd

    if features is None:
        return {}
    table = pd.DataFrame(features)
    if table.empty:
        return {}
    if "index" in table.columns:
        keys = table["index"].astype(int).tolist()
    else:
        keys = list(range(len(table)))
    records = table.to_dict("records")
    return dict(zip(keys, records, strict=True))


def _labels_2d(data: Any, attributes: dict[str, Any]) -> np.ndarray:
    labels = np.asarray(data)
    labels = np.squeeze(labels) if labels.ndim > 2 else labels
    if labels.ndim != 2:
        name = attributes.get("name", "the layer")
        raise ValueError(
            f"{name} has shape {np.shape(data)}: only 2-D labels can be written as a map"
        )
    return labels


def _layer_georeferencing(attributes: dict[str, Any]):
    from rasterio.transform import Affine

    crs, transform = georeferencing(attributes.get("metadata"))
    if transform is None:
        scale = tuple(attributes.get("scale", (1.0, 1.0)))[-2:]
        translate = tuple(attributes.get("translate", (0.0, 0.0)))[-2:]
        if np.allclose(scale, 1.0) and np.allclose(translate, 0.0):
            transform = Affine.identity()  # not placed on a map: pixel coordinates
        else:
            # A layer the analyst made on a map-placed image: our world convention gives its
            # transform; with no source raster there is no CRS to record.
            transform = transform_from_layer(scale, translate)
    return crs, transform


# ----------------------------------------------------------------------------- vector reader

VECTOR_SUFFIXES = (".gpkg", ".shp", ".geojson", ".fgb", ".parquet")


def get_vector_reader(path: str | Sequence[str]) -> Callable[[Any], list[LayerData]] | None:
    """npe2 reader hook for vector files: polygons and lines as a Shapes layer, points as a
    Points layer, in map units (the world convention above), so they line up with rasters of
    the same CRS and can be used as exemplar (or click) layers."""
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if len(paths) != 1 or Path(paths[0]).suffix.lower() not in VECTOR_SUFFIXES:
        return None
    return _read_vectors_or_notify


def _read_vectors_or_notify(path: str | Sequence[str]) -> list[LayerData]:
    path = path if isinstance(path, str | os.PathLike) else path[0]
    try:
        return vector_layers(path)
    except (ValueError, OSError, TypeError) as exc:
        from napari.utils.notifications import show_error

        show_error(f"napari-sam3 could not open {path}: {exc}")
        return [(None,)]


def vector_layers(path: str | os.PathLike, crs: Any = None) -> list[LayerData]:
    """A vector file as napari layer tuples in map units of its CRS (or of ``crs``, reprojected).

    Vertices are world ``(y, x) = (-northing, easting)``; every scalar attribute becomes a layer
    feature; MultiPolygons give one shape per part (their row repeated). A file without a CRS is
    refused (it cannot be placed on a map).
    """
    from napari_sam3.prompts.vector import read_vectors

    gdf = read_vectors(path)
    if crs is not None:
        gdf = gdf.to_crs(crs)
    gdf = gdf[~gdf.geometry.is_empty & gdf.geometry.notna()]
    parts = gdf.explode(index_parts=False).reset_index(drop=True)
    kinds = parts.geometry.geom_type
    columns = [c for c in parts.columns if c != parts.geometry.name]
    features = parts[columns].copy()
    for name in columns:
        if features[name].dtype == object:
            features[name] = features[name].map(lambda v: v if v is None else str(v))
    meta = {
        "crs": crs_text(gdf.crs),
        "source": str(path),
        SAM3_KEY: {"version": METADATA_VERSION, "kind": "vectors", "world": WORLD_CONVENTION},
    }
    base = Path(path).stem
    layers: list[LayerData] = []
    shaped = kinds.isin(["Polygon", "LineString", "LinearRing"]).to_numpy()
    if shaped.any():
        data, shape_types = [], []
        for geom in parts.geometry[shaped]:
            ring = geom.exterior.coords if geom.geom_type == "Polygon" else geom.coords
            xy = np.asarray(ring, dtype=np.float64)[:, :2]
            if geom.geom_type == "Polygon":
                xy = xy[:-1]  # napari closes polygons itself
            data.append(np.stack([-xy[:, 1], xy[:, 0]], axis=1))
            shape_types.append("polygon" if geom.geom_type == "Polygon" else "path")
        kwargs = {
            "name": base,
            "shape_type": shape_types,
            "features": features[shaped].reset_index(drop=True),
            "metadata": meta,
            "edge_color": "yellow",
            "face_color": "transparent",
        }
        layers.append((data, kwargs, "shapes"))
    points = (kinds == "Point").to_numpy()
    if points.any():
        geoms = parts.geometry[points]
        data = np.stack([-geoms.y.to_numpy(), geoms.x.to_numpy()], axis=1)
        kwargs = {
            "name": f"{base} points" if shaped.any() else base,
            "features": features[points].reset_index(drop=True),
            "metadata": meta,
        }
        layers.append((data, kwargs, "points"))
    if not layers:
        raise ValueError(f"{path} holds no polygons, lines or points to show")
    return layers

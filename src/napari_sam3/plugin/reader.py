"""The napari reader of rasters: GeoTIFF / JPEG 2000 band layers in map units, multiscale for large files, with the model's stretch as contrast limits."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_sam3.plugin.georef import affine_list, crs_text, transform_kwargs

SUFFIXES = (".tif", ".tiff", ".jp2", ".j2k", ".vrt")


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


def get_reader(path: str | Sequence[str]) -> Callable[[Any], list[LayerData]] | None:
    """npe2 reader hook: GeoTIFF / JPEG 2000 files (several files are stacked as bands).

    Only the file names are checked here (napari asks every reader, so this stays cheap); a file
    that turns out not to be a readable raster gets a notification naming it and why.
    """
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if len(paths) == 1 and Path(paths[0]).suffix.lower() == ".json":
        from napari_sam3.imagery.stac import looks_like_stac

        return _read_or_notify if looks_like_stac(paths[0]) else None
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
    from napari_sam3.imagery.remote import is_remote
    from napari_sam3.imagery.stac import scene_source

    if isinstance(path, str | os.PathLike):
        source = path
    else:
        paths = list(path)
        source = paths[0] if len(paths) == 1 else paths
    source = scene_source(source)  # a STAC item: its RGB assets
    remote = any(is_remote(p) for p in (source if isinstance(source, list) else [source]))
    if not remote and is_small(raster_info(source)):  # a URL always opens lazily
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
    data = raster.data
    channels = shown_channels(raster)
    limits = _band_limits(raster, channels, percentiles)
    order = _rgb_order(raster, channels)
    return _image_layers(
        raster,
        bands=list(data),
        rgb=lambda: np.moveaxis(data[order], 0, -1),
        limits=limits,
        name=name,
        percentiles=percentiles,
        multiscale=False,
        channels=channels,
    )


def shown_channels(raster):
    """The model's rule for ``raster`` (:func:`~napari_sam3.imagery.stretch.select_channels`):
    the bands shown by default and the invalid pixels, decided once (unflagged fill is said in a
    warning, which napari shows). Bands the file does not name as R, G, B: by their names
    (:func:`default_rgb_bands`)."""
    from napari_sam3.imagery.stretch import select_channels

    try:
        return select_channels(raster)
    except ValueError:
        return select_channels(raster, bands=default_rgb_bands(list(raster.band_names)))


def _band_limits(raster, channels, percentiles) -> list[tuple[float, float]]:
    """Each band's stretch over the pixels the model's rule keeps (none for uint8 RGB)."""
    import dataclasses

    from napari_sam3.imagery.stretch import compute_stretch

    if raster.data.dtype == np.uint8 and len(_rgb_order(raster, channels)) == 3:
        return []
    valid = None if channels.invalid is None else ~channels.invalid
    kept = dataclasses.replace(raster, valid=valid)
    limits = []
    for i in range(raster.data.shape[0]):
        stats = compute_stretch(kept, bands=[i + 1], percentiles=percentiles, nodata="none")
        limits.append((stats.low[0], stats.high[0]))
    return limits


def _rgb_order(raster, channels) -> list[int]:
    """For a uint8 raster whose colours are 3 of its bands (R, G, B by the file, or 3 bands in
    all): their 0-based order; else []."""
    names = list(raster.band_names)
    if len(channels.names) != 3 or (len(names) != 3 and not raster.roles):
        return []
    return [names.index(n) for n in channels.names]


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

    info = pyramid.info
    count = info.count
    bands = [pyramid.band_levels(b) for b in range(1, count + 1)]
    sample = pyramid.sample()
    raster = Raster(sample, info.crs, info.transform, info.nodata, info.band_names, info.path,
                    roles=info.roles)  # fmt: skip
    channels = shown_channels(raster)
    limits = _band_limits(raster, channels, percentiles)
    order = _rgb_order(raster, channels)

    def rgb():
        import dask.array as da

        ordered = [bands[i] for i in order]
        return [da.stack(levels, axis=-1) for levels in zip(*ordered, strict=True)]

    return _image_layers(
        info,
        bands=bands,
        rgb=rgb,
        limits=limits,
        name=name,
        percentiles=percentiles,
        multiscale=True,
        sample=pyramid.sample_description(),
        channels=channels,
    )


def _image_layers(
    raster,
    bands,
    rgb,
    limits,
    name,
    percentiles,
    multiscale: bool,
    sample: str | None = None,
    channels=None,
) -> list[LayerData]:
    """The layer tuples of :func:`raster_layers` / :func:`pyramid_layers`: `raster` gives the
    georeferencing (a Raster or a RasterInfo), `bands` each band's data (an array, or a list of
    levels), `rgb()` the (rows, cols, 3) data of a uint8 RGB raster."""
    count = len(bands)
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
            # the value the model's rule uses: the file's, or unflagged fill found at its border
            "nodata": raster.nodata if channels is None else channels.nodata,
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

    if not limits:  # uint8 colours: one RGB layer, R, G, B as the file declares them
        names = list(channels.names) if channels is not None else names
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

    rgb_bands = list(channels.names) if channels is not None else default_rgb_bands(names)
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

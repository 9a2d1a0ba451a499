"""Turn satellite bands (uint16, int16, float reflectance, ...) into the uint8 RGB the model takes.

Each band is stretched linearly between two percentiles of its valid pixels (default 2 and 98) to
0..255; pixels below/above clip to 0/255, nodata and NaN pixels become 0. Percentiles make the
stretch robust to a few hot (saturated) pixels.

- Integer bands of 8 or 16 bits: exact percentiles (numpy's ``linear`` method) from a full
  histogram, and the stretch is applied through a lookup table; neither sorts nor copies the band.
- Other dtypes (float, 32/64-bit integers): percentiles of a regular strided subsample of at most
  ~4 M pixels (all pixels when the band is smaller), NaN, +-inf and nodata excluded.
- A band whose valid pixels are all equal (``low == high``) maps that value to mid-grey 128, values
  below to 0 and above to 255, with a warning: no division by zero, and the image stays visible.

Bands follow the one rule of :mod:`napari_sam3.imagery.bands` (1-based indices, as in rasterio, or
case-insensitive names), so ``bands=(4, 3, 2)``
means the same thing for a file, a :class:`~napari_sam3.imagery.raster.Raster` and its ``.data``.
To stretch tiles of one scene consistently, compute :class:`StretchStats` once
(:func:`scene_stretch` or :func:`compute_stretch`) and pass ``stats=`` for every tile.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.bands import BandKey, model_bands, resolve_bands
from napari_sam3.imagery.raster import (
    PathLike,
    Raster,
    WindowLike,
    _describe_path,
    read_raster,
)
from napari_sam3.imagery.validity import (
    Fill,
    NodataLike,
    effective_nodata,
    infer_fill,
    invalid_pixels,
)

_CHUNK_PIXELS = 1 << 21  # rows per chunk are sized so temporaries stay ~16 MB
_MAX_SAMPLES = 1 << 22  # float bands: percentiles from at most this many pixels
_LUT_DTYPES = {np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16)}


@dataclass(frozen=True)
class StretchStats:
    """Per-channel stretch limits: channel ``i`` maps ``low[i]`` -> 0 and ``high[i]`` -> 255.

    ``to_dict``/``from_dict`` give a JSON-serialisable form.
    """

    low: tuple[float, ...]
    high: tuple[float, ...]
    percentiles: tuple[float, float] = (2.0, 98.0)
    band_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        low = tuple(float(v) for v in self.low)
        high = tuple(float(v) for v in self.high)
        if not low or len(low) != len(high):
            raise InvalidInput(
                f"StretchStats needs one low and one high per channel, got {len(low)} low and "
                f"{len(high)} high values."
            )
        for i, (lo, hi) in enumerate(zip(low, high, strict=True)):
            if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
                raise InvalidInput(
                    f"StretchStats channel {i + 1}: need finite low <= high, got low={lo}, high={hi}."
                )
        names = None if self.band_names is None else tuple(str(n) for n in self.band_names)
        if names is not None and len(names) != len(low):
            raise InvalidInput(
                f"StretchStats has {len(low)} channel(s) but {len(names)} band names {names}."
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "percentiles", _check_percentiles(self.percentiles))
        object.__setattr__(self, "band_names", names)

    def __len__(self) -> int:
        return len(self.low)

    def to_dict(self) -> dict[str, Any]:
        return {
            "low": list(self.low),
            "high": list(self.high),
            "percentiles": list(self.percentiles),
            "band_names": None if self.band_names is None else list(self.band_names),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StretchStats:
        try:
            return cls(
                low=tuple(data["low"]),
                high=tuple(data["high"]),
                percentiles=tuple(data.get("percentiles", (2.0, 98.0))),  # type: ignore[arg-type]
                band_names=None if data.get("band_names") is None else tuple(data["band_names"]),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidInput(
                f"not a StretchStats dict (need 'low' and 'high' lists): {data!r}"
            ) from exc


def compute_stretch(
    image: np.ndarray | Raster,
    bands: Sequence[BandKey] | None = None,
    percentiles: tuple[float, float] = (2, 98),
    nodata: NodataLike = None,
    channel_axis: int | None = None,
) -> StretchStats:
    """Percentile stretch limits of the 1 or 3 channels :func:`to_model_rgb` would use.

    Arguments as for :func:`to_model_rgb`. Raises ValueError if a channel has no valid pixel.
    """
    pct = _check_percentiles(percentiles)
    return stretch_of(select_channels(image, bands, nodata, channel_axis), pct)


def stretch_of(channels: Channels, percentiles: tuple[float, float] = (2, 98)) -> StretchStats:
    """The percentile stretch of :func:`select_channels`' valid pixels."""
    pct = _check_percentiles(percentiles)
    lows, highs = [], []
    planes, names = channels.planes, channels.names
    for i, plane in enumerate(planes):
        label = names[i] if names else f"channel {i + 1}"
        lo, hi = _plane_percentiles(plane, pct, channels.invalid, label)
        if hi == lo:
            warnings.warn(
                f"{label}: percentiles {pct[0]:g} and {pct[1]:g} are both {lo:g} (a "
                "constant or nearly constant band), so that value is shown as mid-grey 128. "
                "Compute the stretch on a larger area (scene_stretch) to avoid this.",
                UserWarning,
                stacklevel=2,
            )
        lows.append(lo)
        highs.append(hi)
    return StretchStats(tuple(lows), tuple(highs), pct, names or None)


def scene_stretch(
    path: PathLike | Sequence[PathLike],
    bands: Sequence[BandKey] | None = None,
    percentiles: tuple[float, float] = (2, 98),
    max_size: int = 2048,
    nodata: NodataLike = None,
    window: WindowLike | None = None,
    gsd: float | None = None,
) -> StretchStats:
    """Stretch limits for a whole scene from a decimated read (longest side at most ``max_size``).

    Pass the result as ``stats=`` to :func:`to_model_rgb` for every tile of the scene.
    ``window`` limits it to a part of the scene (an area of interest), in pixels of the ``gsd``
    grid when ``gsd`` is given (as :func:`~napari_sam3.imagery.raster.read_raster`).
    """
    raster = read_raster(path, bands=bands, window=window, max_size=max_size, gsd=gsd)
    return compute_stretch(raster, percentiles=percentiles, nodata=nodata)


def to_model_rgb(
    image: np.ndarray | Raster,
    bands: Sequence[BandKey] | None = None,
    percentiles: tuple[float, float] = (2, 98),
    stats: StretchStats | None = None,
    nodata: NodataLike = None,
    channel_axis: int | None = None,
) -> np.ndarray:
    """uint8 RGB ``(rows, cols, 3)`` for the model from a raster array or :class:`Raster`.

    Args:
        image: 2-D grayscale, or 3-D bands-first ``(bands, rows, cols)`` (as ``read_raster``
            returns) or bands-last ``(rows, cols, bands)`` (numpy/PIL/napari), or a ``Raster``.
        bands: 1 or 3 bands to use, 1-based indices (or band names when ``image`` is a Raster).
            Needed when there are more than 3 bands (4 are accepted for uint8 RGBA: alpha dropped).
        percentiles: low/high percentiles mapped to 0/255.
        stats: precomputed limits (e.g. for a whole scene); overrides ``percentiles``.
        nodata: value to ignore (becomes 0); defaults to the Raster's nodata. NaN is always ignored.
        channel_axis: the band axis of a 3-D array when the shape does not tell (e.g. (3, 4, 3)).

    uint8 input without ``stats`` passes through unchanged (grayscale replicated, alpha dropped).
    Invalid pixels (:mod:`napari_sam3.imagery.validity`) are 0 in every channel.
    """
    return model_input(image, bands, percentiles, stats, nodata, channel_axis)[0]


def model_input(
    image: np.ndarray | Raster,
    bands: Sequence[BandKey] | None = None,
    percentiles: tuple[float, float] = (2, 98),
    stats: StretchStats | None = None,
    nodata: NodataLike = None,
    channel_axis: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`to_model_rgb` and the invalid pixels it zeroed (bool (rows, cols), or None)."""
    channels = select_channels(image, bands, nodata, channel_axis)
    return channels_rgb(channels, stats, percentiles), channels.invalid


def channels_rgb(
    channels: Channels,
    stats: StretchStats | None = None,
    percentiles: tuple[float, float] = (2, 98),
) -> np.ndarray:
    """The uint8 RGB of :func:`select_channels`' result, stretched by ``stats`` (default: its
    own percentiles; uint8 as it is), invalid pixels 0."""
    pct = _check_percentiles(percentiles)
    planes, names, invalid = channels.planes, channels.names, channels.invalid
    rows, cols = planes[0].shape
    out = np.empty((rows, cols, 3), dtype=np.uint8)
    if stats is None and planes[0].dtype == np.uint8:
        for c in range(3):
            out[..., c] = planes[c if len(planes) == 3 else 0]
        if invalid is not None:
            out[invalid] = 0
        return out
    if stats is None:
        stats = stretch_of(channels, pct)
    elif not isinstance(stats, StretchStats):
        raise InvalidInput(f"stats must be a StretchStats, got {type(stats).__name__}.")
    if len(stats) != len(planes):
        raise InvalidInput(
            f"stats has {len(stats)} channel(s) but the image gives {len(planes)}; compute the "
            "stats with the same bands= as this call."
        )
    if stats.band_names and names and tuple(stats.band_names) != tuple(names):
        raise InvalidInput(
            f"stats were computed for bands {list(stats.band_names)} but this call uses "
            f"{list(names)}; recompute them or pick the same bands."
        )
    if len(planes) == 1:
        _stretch_into(planes[0], stats.low[0], stats.high[0], out)
    else:
        for c, plane in enumerate(planes):
            _stretch_into(plane, stats.low[c], stats.high[c], out[..., c : c + 1])
    if invalid is not None:
        out[invalid] = 0
    return out


# ----------------------------------------------------------------------------- channel selection


@dataclass(frozen=True)
class Channels:
    """The 1 or 3 planes the model gets, their names, why those bands, and the invalid pixels."""

    planes: list[np.ndarray]
    names: tuple[str, ...]
    why: str
    invalid: np.ndarray | None
    nodata: float | None  # the value the validity rule used (None: none)
    fill: Fill | None  # unflagged fill found in these pixels (then nodata is its value)


def select_channels(
    image: np.ndarray | Raster,
    bands: Sequence[BandKey] | None = None,
    nodata: NodataLike = None,
    channel_axis: int | None = None,
) -> Channels:
    """The channels :func:`to_model_rgb` uses: ``bands`` as given, else chosen by the bands'
    colour interpretation and names (:func:`~napari_sam3.imagery.bands.model_bands`); invalid
    pixels by :mod:`napari_sam3.imagery.validity` (unflagged fill looked for in a Raster with no
    nodata and no mask, and said in a UserWarning, unless ``nodata`` is given)."""
    names: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    valid = None
    declared = None
    if isinstance(image, Raster):
        if channel_axis not in (None, 0):
            raise InvalidInput("a Raster is always bands-first; leave channel_axis unset.")
        arr, channel_axis, names = image.data, 0, image.band_names
        roles, valid, declared = image.roles, image.valid, image.nodata
    else:
        arr = np.asarray(image)
    _check_array(arr)
    if arr.ndim == 2:
        stack = arr[np.newaxis]
    else:
        axis = _channel_axis(arr.shape, channel_axis)
        stack = np.moveaxis(arr, axis, 0)
    count = stack.shape[0]

    where = "the Raster" if isinstance(image, Raster) else "the array"
    if bands is None:
        chosen, why = model_bands(
            count, roles, names, _describe(image), four_is_rgba=arr.dtype == np.uint8
        )
    else:
        if isinstance(bands, str | int | np.integer):
            bands = [bands]
        chosen = resolve_bands(bands, count, names or None, where)
        if len(chosen) not in (1, 3):
            raise InvalidInput(
                f"bands={list(bands)} selects {len(chosen)} bands; choose 3 (RGB) or 1 (grayscale)."
            )
        why = "bands " + ", ".join(str(b) for b in bands) + " as asked"
    planes = [stack[i] for i in chosen]
    selected = tuple(names[i] for i in chosen) if names else ()
    value = effective_nodata(nodata, declared)
    fill = None
    if value is None and nodata is None and isinstance(image, Raster) and valid is None:
        fill = infer_fill(planes)
        if fill is not None:
            value = fill.value
            warnings.warn(fill.message(_describe(image)), UserWarning, stacklevel=3)
    invalid = invalid_pixels(planes, value, valid)
    return Channels(planes, selected, why, invalid, value, fill)


def _describe(image: np.ndarray | Raster) -> str:
    return _describe_path(image.path) if isinstance(image, Raster) else "the array"


def _check_array(arr: np.ndarray) -> None:
    if arr.ndim not in (2, 3):
        raise InvalidInput(
            f"expected a 2-D (rows, cols) or 3-D (bands, rows, cols)/(rows, cols, bands) image, "
            f"got {arr.ndim}-D with shape {arr.shape}; squeeze or select the image first."
        )
    if arr.size == 0:
        raise InvalidInput(f"the image is empty (shape {arr.shape}); nothing to stretch.")
    if arr.dtype == np.bool_ or arr.dtype.kind not in "uif":
        raise InvalidInput(
            f"cannot stretch an image of dtype {arr.dtype}; expected unsigned/signed integers or "
            "floats (a bool array is a mask, not an image)."
        )


def _channel_axis(shape: tuple[int, ...], channel_axis: int | None) -> int:
    if channel_axis is not None:
        if isinstance(channel_axis, bool) or not isinstance(channel_axis, int | np.integer):
            raise InvalidInput(f"channel_axis must be 0, 2 or -1, got {channel_axis!r}.")
        if channel_axis not in (0, 2, -1):
            raise InvalidInput(
                f"channel_axis must be 0 (bands, rows, cols) or -1/2 (rows, cols, bands), "
                f"got {channel_axis}."
            )
        return int(channel_axis) % 3
    first, middle, last = shape
    if first < middle and first < last:
        return 0
    if last < first and last < middle:
        return 2
    raise InvalidInput(
        f"cannot tell which axis of shape {shape} holds the bands; pass channel_axis=0 for "
        "(bands, rows, cols) or channel_axis=-1 for (rows, cols, bands)."
    )


def _check_percentiles(percentiles: Sequence[float]) -> tuple[float, float]:
    try:
        lo, hi = (float(p) for p in percentiles)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"percentiles must be two numbers (low, high), e.g. (2, 98); got {percentiles!r}."
        ) from exc
    if not 0 <= lo < hi <= 100:
        raise InvalidInput(f"percentiles must satisfy 0 <= low < high <= 100, got ({lo}, {hi}).")
    return lo, hi


# ----------------------------------------------------------------------------- statistics


def _chunk_rows(plane: np.ndarray) -> int:
    return max(1, _CHUNK_PIXELS // plane.shape[1])


def _raw_values(dtype: np.dtype) -> np.ndarray:
    """The value of every bit pattern of a small integer dtype, indexed by the pattern."""
    unsigned = np.dtype(f"u{dtype.itemsize}")
    return np.arange(1 << (8 * dtype.itemsize), dtype=unsigned).view(dtype)


def _plane_percentiles(
    plane: np.ndarray, pct: tuple[float, float], invalid: np.ndarray | None, label: str
) -> tuple[float, float]:
    if plane.dtype in _LUT_DTYPES:
        lo, hi = _histogram_percentiles(plane, pct, invalid)
    else:
        lo, hi = _sampled_percentiles(plane, pct, invalid)
    if lo is None or hi is None:
        raise InvalidInput(
            f"{label} has no valid pixels (all nodata, masked or NaN); read a larger window "
            "or pass stats= computed for the whole scene."
        )
    return lo, hi


def _histogram_percentiles(
    plane: np.ndarray, pct: tuple[float, float], invalid: np.ndarray | None
) -> tuple[float | None, float | None]:
    unsigned = np.dtype(f"u{plane.dtype.itemsize}")
    bins = 1 << (8 * plane.dtype.itemsize)
    keys = plane.view(unsigned)
    counts = np.zeros(bins, dtype=np.int64)
    step = _chunk_rows(plane)
    for r in range(0, plane.shape[0], step):
        counts += np.bincount(keys[r : r + step].ravel(), minlength=bins)
    if invalid is not None:  # usually the smaller part: take its histogram out
        counts -= np.bincount(keys[invalid], minlength=bins)
    values = _raw_values(plane.dtype)
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(counts[order])
    n = int(cumulative[-1])
    if n == 0:
        return None, None
    sorted_values = values[order].astype(np.float64)

    def kth(k: int) -> float:  # k-th smallest valid value, 0-based
        return float(sorted_values[np.searchsorted(cumulative, k, side="right")])

    out = []
    for p in pct:
        # numpy's default "linear" percentile: interpolate between ranks floor(pos), floor(pos)+1.
        pos = p / 100.0 * (n - 1)
        below = math.floor(pos)
        frac = pos - below
        a, b = kth(below), kth(min(below + 1, n - 1))
        out.append(a + (b - a) * frac)
    return out[0], out[1]


def _sampled_percentiles(
    plane: np.ndarray, pct: tuple[float, float], invalid: np.ndarray | None
) -> tuple[float | None, float | None]:
    step = max(1, math.ceil(math.sqrt(plane.size / _MAX_SAMPLES)))
    sample = np.asarray(plane[::step, ::step], dtype=np.float64)
    valid = np.isfinite(sample)
    if invalid is not None:
        valid &= ~invalid[::step, ::step]
    values = sample[valid]
    if values.size == 0:
        return None, None
    lo, hi = np.percentile(values, pct)
    return float(lo), float(hi)


# ----------------------------------------------------------------------------- applying


def _map_values(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """float64 values -> uint8 by the stretch; NaN -> 0 (callers zero invalid pixels)."""
    if high > low:
        scaled = (values - low) * (255.0 / (high - low))
        np.clip(scaled, 0.0, 255.0, out=scaled)
        np.rint(scaled, out=scaled)
    else:
        scaled = np.where(values < low, 0.0, np.where(values > low, 255.0, 128.0))
    scaled[np.isnan(values)] = 0.0
    return scaled.astype(np.uint8)


def _stretch_into(plane: np.ndarray, low: float, high: float, out: np.ndarray) -> None:
    """Write the stretched ``plane`` into every channel of ``out`` (rows, cols, k)."""
    step = _chunk_rows(plane)
    k = out.shape[2]
    if plane.dtype in _LUT_DTYPES:
        lut = _map_values(_raw_values(plane.dtype).astype(np.float64), low, high)
        lut_k = np.repeat(lut[:, np.newaxis], k, axis=1)
        keys = plane.view(np.dtype(f"u{plane.dtype.itemsize}"))
        for r in range(0, plane.shape[0], step):
            # mode="clip" skips the bounds check (every key is a valid LUT index) and the buffering.
            np.take(lut_k, keys[r : r + step], axis=0, out=out[r : r + step], mode="clip")
        return
    for r in range(0, plane.shape[0], step):
        chunk = np.asarray(plane[r : r + step], dtype=np.float64)
        mapped = _map_values(chunk, low, high)
        out[r : r + step] = mapped[..., np.newaxis]

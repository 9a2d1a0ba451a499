"""What the model sees of a scene, decided once from a decimated read: the bands and why, the
validity rule (nodata, mask, inferred fill) and the valid share, the stretch. Every tile of the
scene is then read with the same decisions, and ``napari-sam3 info`` prints them."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from napari_sam3.core.errors import InvalidInput
from napari_sam3.imagery.bands import BandKey
from napari_sam3.imagery.placement import check_placement
from napari_sam3.imagery.raster import (
    RasterInfo,
    Source,
    _describe_path,
    pixel_metres,
    raster_info,
    read_raster,
)
from napari_sam3.imagery.stretch import (
    Channels,
    StretchStats,
    channels_rgb,
    select_channels,
    stretch_of,
)
from napari_sam3.imagery.validity import NO_NODATA, Fill, NodataLike, _number, check_nodata

# The decimated read the decisions are made on (longest side, pixels).
VIEW_SIZE = 2048


@dataclass(frozen=True)
class SceneView:
    """The decisions for one scene (picklable: batch tasks carry it)."""

    band_names: tuple[str, ...]  # the 1 or 3 bands the model gets, in R, G, B order
    why: str  # why those bands
    nodata: float | None  # the value every tile is read with (None: no nodata value)
    rule: str  # what marks pixels invalid, in words
    fill: Fill | None  # unflagged fill found (nodata is then its value)
    valid_share: float  # of the decimated read (of ``region`` when given)
    stats: StretchStats | None  # None: uint8 bands go to the model as they are
    dtype: str
    placement: str | None = None  # the raster lies far outside its CRS's area (check_placement)

    @property
    def tile_nodata(self) -> float | str:
        """``nodata=`` for each tile's read: the decided value, or 'none' (no second guess)."""
        return NO_NODATA if self.nodata is None else self.nodata

    def summary(self) -> str:
        """The facts in one line (the napari panel's status)."""
        bands = ", ".join(self.band_names) or "as read"
        fill = "" if self.fill is None else f"; {_number(self.fill.value)} inferred as fill"
        line = f"model saw bands {bands}, {self.valid_share:.0%} valid ({self.rule}){fill}"
        return line if self.placement is None else f"{line}; WARNING: {self.placement}"

    def lines(self) -> list[str]:
        stretch = (
            "none (uint8 bands as they are)"
            if self.stats is None
            else "; ".join(
                f"{n or i + 1} {lo:g}..{hi:g}"
                for i, (n, lo, hi) in enumerate(
                    zip(
                        self.band_names or [""] * len(self.stats),
                        self.stats.low,
                        self.stats.high,
                        strict=True,
                    )
                )
            )
            + f" (percentiles {self.stats.percentiles[0]:g}-{self.stats.percentiles[1]:g})"
        )
        return [
            f"bands: {', '.join(self.band_names) or 'as read'} ({self.why})",
            f"valid pixels: {self.valid_share:.1%} ({self.rule})",
            f"stretch: {stretch}",
            *([] if self.placement is None else [f"warning: {self.placement}"]),
        ]


def scene_view(
    source: Source | Sequence[Source],
    info: RasterInfo,
    bands: Sequence[BandKey] | None = None,
    nodata: NodataLike = None,
    gsd: float | None = None,
    region: tuple[int, int, int, int] | None = None,
    stats: StretchStats | None = None,
    percentiles: tuple[float, float] = (2, 98),
    warn: bool = True,
) -> SceneView:
    """Decide, from one decimated read of the scene (or of ``region``, r0, c0, r1, c1 on the
    ``gsd`` grid), what every tile is read with. Unflagged fill found is said once (a
    UserWarning, unless ``warn`` is False)."""
    return _decide(source, info, bands, nodata, gsd, region, stats, percentiles, warn)[0]


def _decide(source, info, bands, nodata, gsd, region, stats, percentiles, warn):
    placement = check_placement(info, warn)
    window = None if region is None else np.s_[region[0] : region[2], region[1] : region[3]]
    overview = read_raster(source, bands=bands, window=window, max_size=VIEW_SIZE, gsd=gsd)
    asked = check_nodata(nodata)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        channels = select_channels(overview, as_read(bands, overview.shape[0]), asked)
    if warn:
        for w in said:
            warnings.warn(w.message, w.category, stacklevel=3)
    why = channels.why if bands is None else "bands " + ", ".join(map(str, bands)) + " as asked"
    invalid = channels.invalid
    share = 1.0 if invalid is None else 1.0 - float(np.count_nonzero(invalid)) / invalid.size
    if share == 0:
        raise InvalidInput(
            f"{_describe_path(info.path)} has no valid pixel ({_rule(info, asked, channels.nodata, None)}"
            f"{'' if region is None else ', in the area of interest'}): nothing to segment; if "
            "the nodata value is wrong, pass another (--nodata VALUE) or none (--nodata none)"
        )
    if stats is None and channels.planes[0].dtype != np.uint8:
        stats = stretch_of(channels, percentiles)
    view = SceneView(
        band_names=channels.names,
        why=why,
        nodata=channels.nodata,
        rule=_rule(info, asked, channels.nodata, channels.fill),
        fill=channels.fill,
        valid_share=share,
        stats=stats,
        dtype=str(channels.planes[0].dtype),
        placement=placement,
    )
    return view, channels, overview


def describe(
    source: Source | Sequence[Source],
    bands: Sequence[BandKey] | None = None,
    nodata: NodataLike = None,
    gsd: float | None = None,
    tile_size: int = 1008,
    overlap: int | None = None,
    preview: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> list[str]:
    """What the model is given of a raster, in lines (``napari-sam3 info RASTER``): its grid and
    placement, the bands and why, the validity rule and the valid share, the stretch, and how
    many tiles of ``tile_size`` run or are skipped for having no valid pixel. ``preview``:
    write the model's view of the scene there as a PNG (at most 1024 pixels across)."""
    from napari_sam3.scene.tiles import tile_grid

    info = raster_info(source, gsd=gsd)
    view, channels, overview = _decide(source, info, bands, nodata, gsd, None, None, (2, 98), False)
    metres = pixel_metres(info) if gsd is None else float(gsd)
    crs = "no CRS" if info.crs is None else info.crs.to_string()
    lines = [
        f"raster: {_describe_path(info.path)}: {info.rows} x {info.cols} pixels, {info.count} band(s) "
        f"{np.dtype(info.dtype)}, {crs}, "
        + ("pixel size unknown" if math.isnan(metres) else f"{metres:.3g} m per pixel"),
    ]
    if info.placement:
        lines.append(f"placement: {info.placement}")
    lines += view.lines()
    if view.fill is not None:
        lines.append("note: " + view.fill.message())
    overlap = tile_size // 8 if overlap is None else overlap
    tiles = tile_grid(info.rows, info.cols, tile_size, overlap)
    empty = _empty_tiles(tiles, channels.invalid, info)
    lines.append(
        f"tiles: {len(tiles)} of {tile_size} pixels ({overlap} overlap): {len(tiles) - empty} to "
        f"run, {empty} skipped (no valid pixel)"
    )
    if preview is not None:
        picture = channels_rgb(_shrunk(channels, 1024), view.stats)
        written = write_png(picture, preview, overwrite)
        lines.append(
            f"preview: {written} ({picture.shape[1]} x {picture.shape[0]}, the model's view)"
        )
    return lines


def _empty_tiles(tiles, invalid: np.ndarray | None, info: RasterInfo) -> int:
    """Tiles with no valid pixel in the decimated read (what the run will skip)."""
    if invalid is None:
        return 0
    down, across = invalid.shape[0] / info.rows, invalid.shape[1] / info.cols
    empty = 0
    for t in tiles:
        r0, c0, r1, c1 = t.bounds
        part = invalid[
            int(r0 * down) : max(int(r0 * down) + 1, math.ceil(r1 * down)),
            int(c0 * across) : max(int(c0 * across) + 1, math.ceil(c1 * across)),
        ]
        empty += bool(part.all())
    return empty


def _shrunk(channels: Channels, side: int) -> Channels:
    rows, cols = channels.planes[0].shape
    step = max(1, math.ceil(max(rows, cols) / side))
    if step == 1:
        return channels
    invalid = None if channels.invalid is None else channels.invalid[::step, ::step]
    planes = [p[::step, ::step] for p in channels.planes]
    return dataclasses.replace(channels, planes=planes, invalid=invalid)


def write_png(rgb: np.ndarray, path: str | os.PathLike, overwrite: bool = False) -> Path:
    """``rgb`` (rows, cols, 3) uint8 as a PNG, atomically (an existing file only with
    ``overwrite``)."""
    from PIL import Image

    from napari_sam3.core.files import atomic_path

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise InvalidInput(f"the preview is a PNG; name it ....png, got {path.name}")
    with atomic_path(path, overwrite) as tmp:
        Image.fromarray(rgb).save(tmp, format="PNG")
    return path


def as_read(bands: Sequence[BandKey] | None, count: int) -> list[int] | None:
    """``bands=`` for a raster already read with ``bands``: all of it, in the order asked (None
    lets the bands' colour interpretation decide)."""
    return None if bands is None else list(range(1, count + 1))


def _rule(info: RasterInfo, asked, value: float | None, fill: Fill | None) -> str:
    parts = []
    if info.masked:
        parts.append(
            "GDAL's mask: " + ("alpha band" if "alpha" in info.roles else "mask band or footprint")
        )
    if fill is not None:
        parts.append(f"unflagged fill {_number(fill.value)} in every band (inferred)")
    elif value is not None:
        given = "given" if isinstance(asked, float) else "the file's"
        parts.append(f"nodata {_number(value)} in every band ({given})")
    elif asked == NO_NODATA:
        parts.append("no nodata value (--nodata none)")
    parts.append("NaN" if np.dtype(info.dtype).kind == "f" else "")
    text = "; ".join(p for p in parts if p)
    return text or "every pixel (no nodata, mask or fill)"

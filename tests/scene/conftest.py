"""Scene fixtures: small GeoTIFFs written on the fly and a stub client that 'sees' bright values."""

from __future__ import annotations

import contextlib
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from napari_sam3.client.results import empty_result

from .. import _rasters
from .._rasters import TEN_METRES

UTM33 = "EPSG:32633"


def write_geotiff(
    path: Path,
    data: np.ndarray,
    crs: str | None = UTM33,
    nodata: float | None = None,
) -> Path:
    """A bands-first array as a GeoTIFF on a 10 m grid (no georeferencing when crs is None)."""
    return _rasters.write_geotiff(path, data, TEN_METRES, crs, nodata=nodata)


class StubClient:
    """Stands in for Sam3Client's per-tile calls: every distinct value above 50 in the red channel
    of the (uint8, unstretched) tile is one object, scored value / 255. It records each call."""

    image_size = 64
    model_id = "stub"
    manifest = types.SimpleNamespace(max_keywords=4)
    # the Engine members scenes read: a remote engine's (nothing cached in this process)
    engine = types.SimpleNamespace(concurrency=lambda: 1, local=False)

    def __init__(self, full_tile: bool = False) -> None:
        self.full_tile = full_tile
        self.tiles: list[tuple[int, int]] = []

    def prepare(self, rgb: np.ndarray) -> np.ndarray:
        return rgb

    def cache_limits(self, *_bounds, **_named) -> contextlib.nullcontext:
        return contextlib.nullcontext()  # a stub holds no cache

    def segment(self, image, prompt=None, concept=None, **_options) -> pd.DataFrame:
        self.tiles.append(image.shape[:2])
        red = image[..., 0]
        if self.full_tile:
            masks, scores = [np.ones(red.shape, bool)], [0.5]
        else:
            values = [v for v in np.unique(red) if v > 50]
            masks, scores = [red == v for v in values], [v / 255 for v in values]
        if not masks:
            return empty_result()
        boxes = []
        for m in masks:
            rows, cols = np.nonzero(m)
            boxes.append(np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], "f4"))
        return pd.DataFrame(
            {
                "box": boxes,
                "score": np.array(scores, np.float32),
                "mask": masks,
                "keyword": prompt or "",
                "prompt_kind": "text",
            }
        )

    def multi(self, image, keywords, **options) -> pd.DataFrame:
        frames = [self.segment(image, k, **options) for k in keywords]
        return pd.concat(frames, ignore_index=True)


@pytest.fixture
def stub() -> StubClient:
    return StubClient()


@pytest.fixture
def make_stub():
    """StubClient itself, for tests that need options or several stubs."""
    return StubClient


@pytest.fixture
def geotiff():
    """write_geotiff(path, data, crs=UTM33, nodata=None) -> path."""
    return write_geotiff

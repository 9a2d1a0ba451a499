"""Sizes are bounded before anything is allocated (issue 24).

On the code before: `everything(points_per_side=10000)` ran (hangs at 10^8 prompts); a 60000 px
GeoTIFF (a sparse file of ~100 KB) or a 60000 px memmap passed to `client.segment` was read
whole (> 2.5 GB within seconds, on the way to 11-22 GB).
"""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput

SIDE = 60_000


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_points_per_side_past_the_bound_is_refused_before_any_request(local_client, s2_crop):
    session = local_client.interactive(s2_crop)
    with pytest.raises(InvalidInput, match=r"points_per_side must be an integer from 1 to 64"):
        session.everything(points_per_side=10_000)
    assert validate.points_per_side(validate.MAX_POINTS_PER_SIDE) == 64


def test_a_huge_sparse_geotiff_is_refused_from_its_header(local_client, tmp_path):
    path = tmp_path / "huge.tif"
    profile = dict(driver="GTiff", count=1, dtype="uint8", width=SIDE, height=SIDE, tiled=True)
    with rasterio.open(path, "w", sparse_ok=True, **profile):
        pass  # no pixels written: a few KB on disk, 3.6 GB once read
    assert path.stat().st_size < 10_000_000
    before = _rss_bytes()
    with pytest.raises(InvalidInput, match=r"huge.tif is 60000 x 60000 px.*segment_scene"):
        local_client.segment(str(path), "building")
    assert _rss_bytes() - before < 200 * 2**20, "nothing was read"


def test_a_huge_memmap_is_refused_without_touching_its_pages(local_client, tmp_path):
    path = tmp_path / "huge.u8"
    with open(path, "wb") as handle:  # sparse: no block written
        handle.truncate(SIDE * SIDE * 3)
    array = np.memmap(path, dtype=np.uint8, mode="r", shape=(SIDE, SIDE, 3))
    before = _rss_bytes()
    with pytest.raises(InvalidInput, match=r"60000 x 60000 px.*a slice of the array"):
        local_client.segment(array, "building")
    assert _rss_bytes() - before < 200 * 2**20, "the memmap was not read"

"""Scale fixtures: small GeoTIFFs written on the fly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .. import _rasters
from .._rasters import TEN_METRES
from .._required import require


def write_geotiff(path: Path, data: np.ndarray, crs: str = "EPSG:32633", transform=None) -> Path:
    """A bands-first array as a GeoTIFF (10 m pixels unless `transform` is given)."""
    return _rasters.write_geotiff(path, data, transform or TEN_METRES, crs)


@pytest.fixture
def geotiff():
    return write_geotiff


@pytest.fixture(scope="session")
def dask_cluster():
    """One running dask.distributed LocalCluster (two worker processes, one thread each) that
    tests send work to by its address, as to any scheduler (`--dask tcp://...`)."""
    distributed = require("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=40,
    ) as cluster:
        yield cluster

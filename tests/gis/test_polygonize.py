"""The polygons of a mask are exactly its pixels: whatever the mask (holes, parts touching at a
corner, single pixels, a mask at the window's edge), its MultiPolygon is valid, rasterizes back
to it, has one part per 4-connected region and covers its pixel count in area."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyproj
import rasterio.features
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from rasterio import Affine
from scipy import ndimage

from napari_sam3.gis.vector import to_geodataframe

TRANSFORM = Affine(10.0, 0.0, 500_000.0, 0.0, -10.0, 5_800_000.0)
FOUR = ndimage.generate_binary_structure(2, 1)  # 4-connected: the polygons' own rule
masks = st.tuples(st.integers(1, 24), st.integers(1, 24)).flatmap(
    lambda shape: arrays(bool, shape, elements=st.booleans())
)


@settings(max_examples=150, deadline=None)
@given(st.lists(masks, min_size=1, max_size=3))
def test_polygons_are_exactly_the_masks_pixels(chosen):
    shape = (max(m.shape[0] for m in chosen), max(m.shape[1] for m in chosen))
    frames = [np.pad(m, [(0, shape[0] - m.shape[0]), (0, shape[1] - m.shape[1])]) for m in chosen]
    df = pd.DataFrame({"mask": frames, "score": np.linspace(0.9, 0.5, len(frames))})
    gdf = to_geodataframe(df, crs="EPSG:32633", transform=TRANSFORM)
    assert len(gdf) == len(frames)
    for mask, row in zip(frames, gdf.itertuples(), strict=True):
        geometry = row.geometry
        assert geometry.geom_type == "MultiPolygon" and geometry.is_valid
        assert row.area_px == mask.sum()
        assert abs(geometry.area - mask.sum() * 100.0) < 1e-6 * max(1, mask.sum()) * 100.0
        if not mask.any():
            assert geometry.is_empty
            continue
        assert len(geometry.geoms) == ndimage.label(mask, FOUR)[1]
        back = rasterio.features.rasterize(
            [geometry], out_shape=mask.shape, transform=TRANSFORM, dtype=np.uint8
        )
        np.testing.assert_array_equal(back.astype(bool), mask)


@settings(max_examples=40, deadline=None)
@given(lon=st.floats(-179.0, 178.0), lat=st.floats(-70.0, 70.0), turn=st.sampled_from([0, 1]))
def test_area_on_a_raster_in_degrees_is_the_grounds_wherever_its_longitudes_are_written(
    lon, lat, turn
):
    """The same ground's mask on a grid in degrees written -180..180 or one turn on (0..360):
    its area_m2 is its geodesic area (pyproj's Geod, within 1%), never NaN."""
    mask = np.zeros((40, 60), bool)
    mask[5:30, 10:50] = True
    mask[12:20, 20:30] = False
    transform = Affine(0.001, 0.0, lon + 360.0 * turn, 0.0, -0.001, lat)
    df = pd.DataFrame({"mask": [mask], "score": [0.9]})
    (row,) = to_geodataframe(df, crs="EPSG:4326", transform=transform).itertuples()
    area, geometry = row.area_m2, row.geometry
    geodesic, _ = pyproj.Geod(ellps="WGS84").geometry_area_perimeter(geometry)
    assert abs(area - abs(geodesic)) <= 0.01 * abs(geodesic), (area, geodesic)

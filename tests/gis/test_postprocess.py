"""Vector post-processing on real output (the tiny model on the Sentinel-2 window)."""

from __future__ import annotations

import numpy as np
import pytest
import shapely

from napari_sam3.gis.post import PostProcess, postprocess
from napari_sam3.scene import scene_geodataframe


@pytest.fixture(scope="module")
def polygons(scene_result, s2_scene_tif):
    gdf = scene_geodataframe(scene_result, s2_scene_tif)
    assert len(gdf) > 3
    return gdf


def _vertices(gdf) -> int:
    return int(shapely.get_num_coordinates(gdf.geometry.to_numpy()).sum())


def _axis_edges(geom) -> float:
    """Share of the boundary's edges that are horizontal or vertical (1.0: a pixel staircase)."""
    coords = [np.asarray(r.coords) for p in geom.geoms for r in [p.exterior, *p.interiors]]
    d = np.concatenate([np.diff(c, axis=0) for c in coords])
    d = d[np.hypot(*d.T) > 0]
    return float(np.mean(np.isclose(d[:, 0], 0) | np.isclose(d[:, 1], 0)))


def test_off_by_default(polygons):
    out = postprocess(polygons)
    assert out.geometry.equals(polygons.geometry)


def test_minimum_area(polygons):
    threshold = int(np.median(polygons["area_px"]))
    by_px = postprocess(polygons, min_area_px=threshold)
    assert list(by_px["label_id"]) == list(polygons["label_id"][polygons["area_px"] >= threshold])
    by_m2 = postprocess(polygons, min_area_m2=threshold * 100.0)  # 10 m pixels
    assert list(by_m2["label_id"]) == list(by_px["label_id"])
    assert 0 < len(by_px) < len(polygons)


def test_fill_holes(polygons):
    holes = polygons.geometry.map(lambda g: sum(len(p.interiors) for p in g.geoms))
    assert holes.sum() > 0, "the real output should have holes to fill"
    out = postprocess(polygons, fill_holes=True)
    assert out.geometry.map(lambda g: sum(len(p.interiors) for p in g.geoms)).sum() == 0
    grew = out.geometry.area.to_numpy() - polygons.geometry.area.to_numpy()
    assert np.all(grew >= -1e-6) and np.all((grew > 0) == (holes.to_numpy() > 0))
    np.testing.assert_allclose(out["area_m2"], out.geometry.area)


def test_simplify_in_crs_units(polygons):
    out = postprocess(polygons, simplify=15.0)  # metres
    assert _vertices(out) < _vertices(polygons)
    assert out.geometry.is_valid.all()
    for a, b in zip(polygons.geometry, out.geometry, strict=True):
        # Douglas-Peucker moves the outline by about the tolerance, not more
        assert a.symmetric_difference(b).area <= 15.0 * 1.5 * a.boundary.length
    assert set(out["postprocess"]) == {"simplify=15"}


def test_regularize(polygons):
    out = postprocess(polygons, regularize=True)
    assert out.geometry.is_valid.all() and len(out) == len(polygons)
    assert _vertices(out) < _vertices(polygons)
    for a, b in zip(polygons.geometry, out.geometry, strict=True):
        assert a.intersection(b).area / a.union(b).area > 0.5


def test_smooth(polygons):
    out = postprocess(polygons, smooth=True)
    assert out.geometry.is_valid.all() and len(out) == len(polygons)
    for a, b in zip(polygons.geometry, out.geometry, strict=True):
        assert _axis_edges(a) == 1.0  # polygonized pixel edges
        assert _axis_edges(b) < 0.5  # corners cut
        assert abs(b.area - a.area) < 0.25 * a.area


def test_geographic_crs_refused(polygons):
    with pytest.raises(ValueError, match="projected CRS"):
        postprocess(polygons.to_crs(4326), smooth=True)
    with pytest.raises(ValueError, match="min_area_m2 must be"):
        PostProcess(min_area_m2=-1)


def test_cli_flags(tmp_path, tiny_repository, s2_scene_tif, local_client):
    import geopandas as gpd

    from napari_sam3.cli import main
    from napari_sam3.scene import segment_scene

    ref = segment_scene(
        local_client, s2_scene_tif, "building", score_thr=0.0, max_det=4, progress=False
    )
    threshold = int(np.median([m.area for m in ref["mask"]])) + 1
    out = tmp_path / "post.gpkg"
    args = ["segment", str(s2_scene_tif), "--models", str(tiny_repository), "--precision"]
    args += ["fp32", "--prompt"]  # local_client's precision
    args += ["building", "--score-thr", "0", "--max-det", "4", "--quiet", "--out", str(out)]
    args += ["--min-area-px", str(threshold), "--fill-holes", "--simplify-m", "10"]
    assert main(args) == 0
    got = gpd.read_file(out)
    expected = postprocess(
        scene_geodataframe(ref, s2_scene_tif), min_area_px=threshold, fill_holes=True, simplify=10.0
    )
    assert 0 < len(got) == len(expected) < len(ref)
    assert set(got["postprocess"]) == {f"min_area_px={threshold},fill_holes,simplify=10"}
    for g, e in zip(got.geometry, expected.geometry, strict=True):
        assert g.symmetric_difference(e).area < 1e-6 * e.area
    assert main([*args[:-5], "--overwrite", "--min-area-m2", "-5"]) == 2

"""No output format receives an empty, invalid or non-finite geometry silently: the writer
repairs invalid polygons and drops the rest, and says how many of each."""

from __future__ import annotations

import warnings

import geopandas as gpd
import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely.geometry import Polygon, box

from napari_sam3.core.formats import OUTPUT_FORMATS
from napari_sam3.gis.vector import write_vector

VECTOR = [f for f in OUTPUT_FORMATS.values() if f.vector]


def _read(path):
    return gpd.read_parquet(path) if path.suffix == ".parquet" else gpd.read_file(path)


def _bowtie(x, y, s):
    return Polygon([(x, y), (x + s, y + s), (x + s, y), (x, y + s)])  # self-intersecting


kinds = st.lists(st.sampled_from(["good", "bowtie", "empty", "infinite"]), min_size=1, max_size=6)


@settings(max_examples=12, deadline=None)
@given(kinds, st.integers(0, 1000))
def test_every_format_gets_only_sound_geometries_and_a_count(tmp_path_factory, kinds, seed):
    rng = np.random.default_rng(seed)
    geoms = []
    for kind in kinds:
        x, y = 500_000 + rng.integers(0, 5000), 5_800_000 + rng.integers(0, 5000)
        geoms.append(
            {
                "good": box(x, y, x + 50, y + 30),
                "bowtie": _bowtie(x, y, 40),
                "empty": Polygon(),
                "infinite": box(np.inf, y, np.inf, y + 10),
            }[kind]
        )
    gdf = gpd.GeoDataFrame({"keyword": kinds}, geometry=geoms, crs="EPSG:32633")
    folder = tmp_path_factory.mktemp("sound")
    repaired = kinds.count("bowtie")
    dropped = kinds.count("empty") + kinds.count("infinite")
    for fmt in VECTOR:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            path = write_vector(gdf, folder / f"out{fmt.suffix}")
        said = " ".join(str(w.message) for w in caught)
        if repaired:
            assert f"{repaired} invalid geometr" in said, (fmt.name, said)
        if dropped:
            assert f"{dropped} dropped" in said, (fmt.name, said)
        if not repaired and not dropped:
            assert "repaired" not in said and "dropped" not in said
        back = _read(path)
        kept = [k for k in kinds if k in ("good", "bowtie")]
        # (FlatGeobuf's spatial index orders features its own way)
        assert len(back) == len(kept) and (not kept or sorted(back["keyword"]) == sorted(kept))
        assert back.geometry.is_valid.all() and not back.geometry.is_empty.any()
        assert np.isfinite(shapely.get_coordinates(back.geometry.values)).all()


def test_a_scene_georeferenced_outside_its_crs_says_so_in_geojson(tmp_path):
    far = box(1e9, 1e9, 1e9 + 100, 1e9 + 100)  # UTM far beyond its zone: no longitude exists
    near = box(500_000, 5_800_000, 500_100, 5_800_100)
    gdf = gpd.GeoDataFrame({"keyword": ["far", "near"]}, geometry=[far, near], crs="EPSG:32633")
    with pytest.warns(UserWarning, match="1 dropped .*not finite"):
        path = write_vector(gdf, tmp_path / "out.geojson")
    back = gpd.read_file(path)
    assert back["keyword"].tolist() == ["near"] and back.geometry.is_valid.all()
    # in its own CRS the same polygons are sound: written as they are, without a word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(_read(write_vector(gdf, tmp_path / "out.gpkg"))) == 2

"""A static STAC catalog on the command line: a folder of scenes (its items), run one by one."""

from __future__ import annotations

import pyogrio
import pystac
import pytest

from napari_sam3.cli import main
from napari_sam3.imagery.stac import StacError, catalog_items

from .conftest import BANDS, COMMON, stac_item


@pytest.fixture
def catalog(s2_cogs, tmp_path):
    """catalog.json -> collection -> two items, each pointing at the shared band COGs."""
    folder = s2_cogs["B04"].parent
    root = pystac.Catalog("scenes", "two Sentinel-2 scenes")
    collection = pystac.Collection(
        "s2", "Sentinel-2", pystac.Extent.from_items([stac_item(folder, {"B04": "./B04.tif"})])
    )
    root.add_child(collection)
    for name in ("east", "west"):
        hrefs = {b: (folder / f"{b}.tif").as_uri() for b in BANDS}
        collection.add_item(stac_item(folder, hrefs, COMMON, item_id=name))
    root.normalize_hrefs(str(tmp_path / "stac"))
    root.save(pystac.CatalogType.SELF_CONTAINED)
    return tmp_path / "stac" / "catalog.json"


def test_catalog_items_walks_children(catalog):
    assert sorted(item.id for item in catalog_items(catalog)) == ["east", "west"]
    with pytest.raises(StacError, match="holds no items"):
        empty = pystac.Catalog("empty", "nothing")
        empty.normalize_hrefs(str(catalog.parent.parent / "empty"))
        empty.save(pystac.CatalogType.SELF_CONTAINED)
        catalog_items(catalog.parent.parent / "empty" / "catalog.json")


def test_segment_a_catalog_writes_one_output_per_item(catalog, tiny_repository, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["segment", str(catalog), "--models", str(tiny_repository), "--precision", "fp32", "--prompt", "building",
            "--bbox", "12.60,52.48,12.62,52.49", "--quiet", "--score-thr", "0"]  # fmt: skip
    code = main([*argv, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["east.gpkg", "west.gpkg"]
    layer = pyogrio.read_dataframe(out / "east.gpkg", layer="detections")
    assert layer.crs.to_epsg() == 32633 and len(layer) > 0
    # the same items as tasks of two dask workers, each reading the items' COGs itself
    assert main([*argv, "--out", str(tmp_path / "workers"), "--workers", "2"]) == 0
    for name in ("east", "west"):
        got = pyogrio.read_dataframe(tmp_path / "workers" / f"{name}.gpkg", layer="detections")
        want = pyogrio.read_dataframe(out / f"{name}.gpkg", layer="detections")
        assert list(got.geometry.to_wkb()) == list(want.geometry.to_wkb())
        assert got.drop(columns="geometry").equals(want.drop(columns="geometry"))


def test_batch_options_and_assets_are_refused_where_they_do_not_apply(
    catalog, s2_cogs, tiny_repository, tmp_path, capsys
):
    common = [
        "--models",
        str(tiny_repository),
        "--precision",
        "fp32",
        "--prompt",
        "building",
        "--out",
        str(tmp_path),
    ]
    assert main(["segment", str(s2_cogs["B04"]), *common, "--assets", "B04"]) == 2
    assert "--assets chooses the assets of STAC items" in capsys.readouterr().err

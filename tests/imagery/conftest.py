"""Remote-raster fixtures: COGs made from the shipped Sentinel-2 bands, a STAC item that points at
them, and a real range-capable HTTP server on loopback serving both."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import rasterio

from .http_server import RangeServer

BANDS = ("B04", "B03", "B02")
COMMON = {"B04": "red", "B03": "green", "B02": "blue"}
# 64 px blocks on a 768 x 1536 scene: the proportions of a Sentinel-2 COG (10980 px, 1024 px blocks).
BLOCK = 64


def write_cog(source: Path, target: Path, block: int = BLOCK) -> Path:
    """A Cloud-Optimised GeoTIFF (tiled ``block`` px, deflate, average overviews) of a raster."""
    with rasterio.open(source) as src:
        profile = {
            "driver": "COG",
            "count": src.count,
            "height": src.height,
            "width": src.width,
            "dtype": src.dtypes[0],
            "crs": src.crs,
            "transform": src.transform,
            "blocksize": block,
            "compress": "deflate",
            "overview_resampling": "average",
        }
        data = src.read()
    with rasterio.open(target, "w", **profile) as dst:
        dst.write(data)
    return target


def stac_item(
    folder: Path, hrefs: dict[str, str], common: dict[str, str] | None = None, item_id="S2_T33UUU"
):
    """A pystac Item of the scene, one asset per band (``hrefs``: asset key -> href, the first
    a file in ``folder``), with ``eo:bands`` common names ``common`` (asset key -> name)."""
    import pystac
    from pystac.extensions.eo import Band, EOExtension
    from rasterio.warp import transform_bounds

    first = next(iter(hrefs.values()))
    with rasterio.open(folder / Path(first).name) as ds:
        west, south, east, north = transform_bounds(ds.crs, "EPSG:4326", *ds.bounds)
    geometry = {
        "type": "Polygon",
        "coordinates": [
            [[west, south], [east, south], [east, north], [west, north], [west, south]]
        ],
    }
    item = pystac.Item(
        id=item_id,
        geometry=geometry,
        bbox=[west, south, east, north],
        datetime=datetime(2017, 2, 16, 10, 21),
        properties={},
    )
    for key, href in hrefs.items():
        asset = pystac.Asset(href=href, media_type=pystac.MediaType.COG, roles=["data"])
        item.add_asset(key, asset)
        if common and key in common:
            EOExtension.ext(asset, add_if_missing=True).bands = [
                Band.create(name=key, common_name=common[key])
            ]
    return item


def item_json(item) -> bytes:
    return json.dumps(item.to_dict(include_self_link=False, transform_hrefs=False)).encode()


@pytest.fixture(scope="session")
def s2_cogs(s2_rgb_paths, tmp_path_factory) -> dict[str, Path]:
    """B04, B03, B02 of the Sentinel-2 scene as COGs (768 x 1536, 64 px blocks), and a STAC
    item ``item.json`` whose assets (keys B04/B03/B02, eo:bands red/green/blue) are those files
    by relative href."""
    root = tmp_path_factory.mktemp("s2_cogs")
    files = {b: write_cog(p, root / f"{b}.tif") for b, p in zip(BANDS, s2_rgb_paths, strict=True)}
    item = stac_item(root, {b: f"./{b}.tif" for b in BANDS}, COMMON)
    (root / "item.json").write_bytes(item_json(item))
    return {**files, "item": root / "item.json"}


@pytest.fixture
def cog_server(s2_cogs, tmp_path):
    """A fresh RangeServer (a new port, so nothing of another test is in GDAL's cache) serving
    ``/B04.tif``, ``/B03.tif``, ``/B02.tif`` and ``/item.json`` from a folder of its own."""
    www = tmp_path / "www"
    www.mkdir()
    with RangeServer(www) as server:
        for path in s2_cogs.values():
            server.add(path.name, path)
        yield server


@pytest.fixture
def scene_bytes(s2_cogs) -> int:
    """The bytes of the three COGs together."""
    return sum(s2_cogs[b].stat().st_size for b in BANDS)

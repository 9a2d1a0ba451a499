"""A basemap's area as a VRT file (`napari-sam3 basemap`) is a raster layer QGIS opens and the
Processing algorithms take: read from a real XYZ tile server on loopback, the polygons in
EPSG:3857 with the service and its attribution."""

from __future__ import annotations

import geopandas as gpd

from napari_sam3.cli import main

from ..imagery.http_server import RangeServer
from ..imagery.tiles import render_tiles
from .conftest import processing_run

ZOOM = 13


def test_segment_text_takes_a_basemap_vrt_as_input(
    qgis_env, profile, s2_rgb_paths, tiny_repository, local_client, tmp_path
):
    mosaic = render_tiles(s2_rgb_paths, tmp_path / "tiles", ZOOM)
    (west, north), (east, south) = mosaic.at(512, 256) * (0, 0), mosaic.at(768, 448) * (0, 0)
    with RangeServer(tmp_path / "tiles") as server:
        url = server.url("{z}/{x}/{y}.png")
        assert main(["basemap", url, "--bbox", f"{west},{south},{east},{north},EPSG:3857",
                     "--zoom", str(ZOOM), "--attribution", "Tiles © test", "--out",
                     str(tmp_path / "area")]) == 0  # fmt: skip
        (vrt,) = (tmp_path / "area").glob("*.basemap.vrt")
        out = tmp_path / "roofs.gpkg"
        parameters = {"INPUT": str(vrt), "KEYWORDS": "building", "OUTPUT": str(out),
                      "MODELS": str(tiny_repository), "PRECISION": "fp32", "SCORE_THR": 0,
                      "MAX_DET": 4}  # fmt: skip
        (done,) = processing_run(
            qgis_env, profile, [{"algorithm": "napari_sam3:segment_text", "parameters": parameters}],
            tmp_path,
        )  # fmt: skip
    assert done["ok"], done
    gdf = gpd.read_file(out)
    assert gdf.crs.to_epsg() == 3857 and len(gdf) > 0
    # (the QGIS worker runs the installed napari_sam3, which must be this one)
    assert set(gdf["service"]) == {url} and set(gdf["attribution"]) == {"Tiles © test"}
    assert set(gdf["model_id"]) == {local_client.model_id}
    minx, miny, maxx, maxy = gdf.total_bounds  # within the area's pixels (float rounding aside)
    tol = 1e-6
    assert west - tol <= minx and maxx <= east + tol and south - tol <= miny and maxy <= north + tol

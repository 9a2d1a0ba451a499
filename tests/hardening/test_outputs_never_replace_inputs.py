"""No output is ever written over an input, and --overwrite says what it replaces (issue 24).

On the code before: `segment DIR --out DIR --format tif --workers 2 --overwrite` replaced the
input raster with the label raster; an exemplar file beside its raster (`scene.tif`,
`scene.gpkg`) was replaced by the output of `--out DIR`; `demo --out DIR` replaced an existing
detections.gpkg and overlay.png without asking.
"""

from __future__ import annotations

import hashlib
import os

import geopandas as gpd
import pytest
import rasterio
from shapely.geometry import box

from napari_sam3.cli import main
from napari_sam3.client.connection import ConnectionSpec
from napari_sam3.scene.batch import segment_scenes
from napari_sam3.scene.output import OutputIsInput


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def scenes(s2_rgb_raster, tmp_path):
    """A folder with two small true-colour GeoTIFFs and an exemplar file named like one of them."""
    root = tmp_path / "scenes"
    root.mkdir()
    for name, (r, c) in {"small.tif": (0, 900), "scene.tif": (300, 100)}.items():
        data = s2_rgb_raster.data[:, r : r + 120, c : c + 150]
        transform = s2_rgb_raster.transform @ rasterio.Affine.translation(c, r)
        profile = dict(driver="GTiff", count=3, height=120, width=150, dtype="uint16")
        with rasterio.open(
            root / name, "w", crs=s2_rgb_raster.crs, transform=transform, **profile
        ) as ds:
            ds.write(data)
    with rasterio.open(root / "scene.tif") as ds:
        x0, y1 = ds.transform * (20, 20)
        x1, y0 = ds.transform * (60, 60)
        crs = ds.crs
    gpd.GeoDataFrame(geometry=[box(x0, y0, x1, y1)], crs=crs).to_file(root / "scene.gpkg")
    return root


def _segment(repo, *args):
    return main(
        ["segment", *map(str, args), "--models", str(repo), "--precision", "fp32", "--quiet"]
    )


@pytest.mark.parametrize("workers", [None, "2"])
def test_an_input_raster_is_never_the_output_even_with_overwrite(
    tiny_repository, scenes, capsys, workers
):
    before = {p.name: _digest(p) for p in scenes.iterdir()}
    extra = ["--workers", workers] if workers else []
    code = _segment(
        tiny_repository, scenes / "small.tif", "--prompt", "building", "--out", scenes,
        "--format", "tif", "--overwrite", *extra,
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "is the input raster" in err and "small.tif" in err
    assert "--overwrite to replace" not in err, "never advise --overwrite for an input"
    assert {p.name: _digest(p) for p in scenes.iterdir()} == before


def test_an_output_folder_reached_through_a_symlink_is_refused(
    tiny_repository, scenes, tmp_path, capsys
):
    link = tmp_path / "link"
    link.symlink_to(scenes, target_is_directory=True)
    before = _digest(scenes / "small.tif")
    code = _segment(
        tiny_repository, scenes / "small.tif", "--prompt", "building", "--out", link,
        "--format", "tif", "--overwrite", "--workers", "1",
    )  # fmt: skip
    assert code == 2 and "is the input raster" in capsys.readouterr().err
    assert _digest(scenes / "small.tif") == before


@pytest.mark.parametrize("workers", [None, "2"])
def test_the_exemplar_file_beside_its_raster_is_never_replaced(
    tiny_repository, scenes, capsys, workers
):
    exemplars = scenes / "scene.gpkg"
    before = _digest(exemplars)
    extra = ["--workers", workers] if workers else []
    code = _segment(
        tiny_repository, scenes / "scene.tif", "--exemplars", exemplars, "--out", scenes,
        "--overwrite", *extra,
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "is the input exemplar file" in err
    assert _digest(exemplars) == before


def test_a_concept_file_is_never_an_output(tiny_repository, scenes, local_client, capsys):
    concept = local_client.encode_exemplars(
        str(scenes / "scene.tif"), boxes=[[20, 20, 60, 60]], name="x"
    )
    named_like_output = scenes / "scene.gpkg"  # a concept saved under a layer's name
    named_like_output.unlink()
    named_like_output.write_bytes(concept.to_bytes())
    before = _digest(named_like_output)
    code = _segment(
        tiny_repository, scenes / "scene.tif", "--concept", named_like_output, "--out", scenes,
        "--overwrite",
    )  # fmt: skip
    assert code == 2 and "is the input concept" in capsys.readouterr().err
    assert _digest(named_like_output) == before


def test_a_hard_link_to_an_input_is_refused_by_the_library(tiny_repository, scenes, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.link(scenes / "small.tif", out / "small.tif")
    before = _digest(scenes / "small.tif")
    spec = ConnectionSpec(repository=tiny_repository, precision="fp32")
    with pytest.raises(OutputIsInput, match="is the input raster"):
        segment_scenes(
            spec, [scenes / "small.tif"], out, fmt="tif", overwrite=True, prompt="building"
        )
    assert _digest(scenes / "small.tif") == before


@pytest.mark.parametrize("workers", [None, "2"])
def test_overwrite_names_every_file_it_replaces(tiny_repository, scenes, tmp_path, capsys, workers):
    out = tmp_path / "out"
    out.mkdir()
    (out / "small.gpkg").write_bytes(b"an analyst's older file")
    args = [scenes / "small.tif", "--prompt", "building", "--out", out]
    args += ["--workers", workers] if workers else []
    assert _segment(tiny_repository, *args) == 2
    err = capsys.readouterr().err
    assert f"{out / 'small.gpkg'} exists" in err and "--overwrite" in err
    assert (out / "small.gpkg").read_bytes() == b"an analyst's older file"
    assert _segment(tiny_repository, *args, "--overwrite", "--score-thr", "0") == 0
    assert f"--overwrite: replacing {out / 'small.gpkg'}" in capsys.readouterr().err
    assert len(gpd.read_file(out / "small.gpkg")) > 0


def test_the_demo_refuses_to_replace_its_outputs_without_overwrite(
    tiny_repository, tmp_path, capsys
):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "detections.gpkg").write_bytes(b"yesterday's run")
    (out / "overlay.png").write_bytes(b"yesterday's picture")
    args = _demo(tiny_repository, out)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "detections.gpkg exist; pass --overwrite to replace" in err
    assert (out / "detections.gpkg").read_bytes() == b"yesterday's run"
    assert (out / "overlay.png").read_bytes() == b"yesterday's picture"

    assert main([*args, "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert f"replacing {out / 'detections.gpkg'}" in err
    assert f"replacing {out / 'overlay.png'}" in err
    assert (out / "overlay.png").read_bytes().startswith(b"\x89PNG")
    assert "random_weights" in gpd.read_file(out / "detections.gpkg").columns


def _demo(repository, out) -> list[str]:
    return ["demo", "--models", str(repository), "--precision", "fp32", "--out", str(out),
            "--keywords", "field"]  # fmt: skip


def test_a_fresh_demo_folder_needs_no_overwrite(tiny_repository, tmp_path):
    out = tmp_path / "fresh"
    args = _demo(tiny_repository, out)
    assert main(args) == 0
    assert sorted(p.name for p in out.iterdir()) == ["detections.gpkg", "overlay.png"]

"""`napari-sam3 segment`: single rasters, folders with a broken file, merged layers, exit codes."""

from __future__ import annotations

import numpy as np
import pyogrio
import pytest
import rasterio

from napari_sam3.cli import main


@pytest.fixture(scope="module")
def folder(s2_rgb_raster, tmp_path_factory):
    """Two 3-band GeoTIFF crops of the Sentinel-2 scene and one broken .tif."""
    root = tmp_path_factory.mktemp("rasters")
    for name, (r, c) in {"east.tif": (0, 900), "west.tif": (300, 100)}.items():
        data = s2_rgb_raster.data[:, r : r + 200, c : c + 260]
        transform = s2_rgb_raster.transform @ rasterio.Affine.translation(c, r)
        profile = dict(driver="GTiff", count=3, height=200, width=260, dtype="uint16")
        with rasterio.open(
            root / name, "w", crs=s2_rgb_raster.crs, transform=transform, **profile
        ) as ds:
            ds.write(data)
    (root / "broken.tif").write_bytes(b"II*\x00" + bytes(range(256)) * 4)
    (root / "notes.txt").write_text("not a raster")
    return root


def _segment(repo, *args):
    return main(
        [
            "segment",
            *map(str, args),
            "--models",
            str(repo),
            "--precision",
            "fp32",
            "--quiet",
            "--score-thr",
            "0",
            "--tile-size",
            "128",
        ]
    )


def test_folder_with_a_broken_file_writes_the_rest_and_exits_1(
    tiny_repository, folder, tmp_path, capsys
):
    out = tmp_path / "out"
    code = _segment(tiny_repository, folder, "--prompt", "building", "--out", out)
    captured = capsys.readouterr()
    assert code == 1
    assert sorted(p.name for p in out.iterdir()) == ["east.gpkg", "west.gpkg"]
    assert "broken.tif" in captured.err and "2 of 3 rasters segmented" in captured.out
    for name in ("east", "west"):
        layer = pyogrio.read_dataframe(out / f"{name}.gpkg", layer="detections")
        assert layer.crs.to_epsg() == 32633
        assert len(layer) > 0, "--score-thr 0 keeps candidates"
        assert set(layer["source"]) == {f"{name}.tif"} and set(layer["keyword"]) == {"building"}


def test_merged_layer_over_several_rasters(tiny_repository, folder, tmp_path, capsys):
    inputs = [folder / "east.tif", folder / "west.tif"]
    out = tmp_path / "all.gpkg"
    code = _segment(tiny_repository, *inputs, "--keywords", "building,road", "--out", out)
    assert code == 0, capsys.readouterr().err
    layer = pyogrio.read_dataframe(out, layer="detections")
    assert set(layer["source"]) == {"east.tif", "west.tif"}
    assert set(layer["keyword"]) == {"building", "road"}
    assert "2 of 2 rasters segmented" in capsys.readouterr().out


def test_existing_output_is_refused_unless_overwrite(tiny_repository, folder, tmp_path, capsys):
    out = tmp_path / "east.tif"
    assert _segment(tiny_repository, folder / "east.tif", "--prompt", "field", "--out", out) == 0
    with rasterio.open(out) as ds, rasterio.open(folder / "east.tif") as src:
        assert (ds.crs, ds.transform, ds.shape, ds.dtypes[0]) == (
            src.crs,
            src.transform,
            src.shape,
            "int32",
        )
    before = out.read_bytes()
    capsys.readouterr()
    assert _segment(tiny_repository, folder / "east.tif", "--prompt", "road", "--out", out) == 2
    assert "exists" in capsys.readouterr().err and out.read_bytes() == before
    code = _segment(
        tiny_repository, folder / "east.tif", "--prompt", "road", "--out", out, "--overwrite"
    )
    assert code == 0
    with rasterio.open(out) as ds:
        assert ds.read(1).dtype == np.int32
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{east}", "--out", "{tmp}/a.gpkg"], "nothing to look for"),
        (["{tmp}/missing.tif", "--prompt", "x", "--out", "{tmp}/a.gpkg"], "no such file"),
        (["{east}", "{west}", "--prompt", "x", "--out", "{tmp}/a.tif"], "one scene"),
        (["{east}", "--prompt", "x", "--out", "{tmp}/a.kml"], "unknown extension"),
        (["{east}", "--prompt", "x", "--out", "{tmp}/nowhere/a.gpkg"], "does not exist"),
        (["{tmp}", "--prompt", "x", "--out", "{tmp}/o"], "holds no rasters"),
        (
            ["{east}", "--prompt", "x", "--out", "{tmp}/a.gpkg", "--memory-budget", "lots"],
            "--memory-budget: memory budget must be a size such as '1.5GB'",
        ),
        (
            ["{east}", "--prompt", "x", "--out", "{tmp}/a.gpkg", "--memory-budget", "100"],
            "too small",
        ),
    ],
)
def test_usage_errors_exit_2(tiny_repository, folder, tmp_path, capsys, args, message):
    names = {"east": folder / "east.tif", "west": folder / "west.tif", "tmp": tmp_path}
    assert _segment(tiny_repository, *[a.format(**names) for a in args]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_memory_budget_reaches_the_run(tiny_repository, folder, tmp_path, monkeypatch):
    from napari_sam3.scene import run

    plans = []
    real = run.scene_plan
    monkeypatch.setattr(run, "scene_plan", lambda *a: plans.append(real(*a)) or plans[-1])
    out = tmp_path / "a.gpkg"
    code = _segment(tiny_repository, folder / "east.tif", "--prompt", "road", "--out", out,
                    "--memory-budget", "700MB")  # fmt: skip
    assert code == 0 and out.is_file()
    assert [p.budget for p in plans] == [700_000_000] and plans[0].measured


def test_missing_model_exits_2(folder, tmp_path, capsys):
    code = main(
        [
            "segment",
            str(folder / "east.tif"),
            "--prompt",
            "x",
            "--models",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "a.gpkg"),
        ]
    )
    assert code == 2 and "model repository" in capsys.readouterr().err


def test_info_still_works(tiny_repository, capsys):
    assert main(["info", "--models", str(tiny_repository), "--precision", "fp32"]) == 0
    assert "image_size" in capsys.readouterr().out


def test_raster_without_crs_is_written_in_pixels_with_a_warning(
    tiny_repository, s2_rgb_raster, tmp_path, capsys
):
    path = tmp_path / "plain.tif"
    profile = dict(driver="GTiff", count=3, height=150, width=200, dtype="uint16")
    with rasterio.open(path, "w", **profile) as ds:
        ds.write(s2_rgb_raster.data[:, :150, :200])
    out = tmp_path / "plain.gpkg"
    assert _segment(tiny_repository, path, "--prompt", "building", "--out", out) == 0
    assert "no CRS" in capsys.readouterr().err
    layer = pyogrio.read_dataframe(out, layer="detections")
    assert layer.crs is None and len(layer) > 0
    minx, miny, maxx, maxy = layer.total_bounds
    assert 0 <= minx < maxx <= 200 and 0 <= miny < maxy <= 150

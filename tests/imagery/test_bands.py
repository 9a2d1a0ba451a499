"""The one band rule (napari_sam3.imagery.bands) and that the raster reader, the stretch and the CLI obey it."""

import numpy as np
import pytest

from napari_sam3.imagery.bands import parse_bands, resolve_band, resolve_bands
from napari_sam3.imagery.raster import Raster
from napari_sam3.imagery.stretch import to_model_rgb

NAMES = ("B02", "B03", "B04", "B08")


def test_integers_are_1_based_and_names_ignore_case():
    assert resolve_bands([4, 3, 2], 4, NAMES) == [3, 2, 1]
    assert resolve_bands([np.int64(1), np.uint8(4)], 4, None) == [0, 3]
    assert resolve_bands(["b08", "B04", " b03 "], 4, NAMES) == [3, 2, 1]
    assert resolve_bands([2, 2, "b03"], 4, NAMES) == [1, 1, 1]  # repeats allowed
    assert resolve_band(1, 1) == 0


@pytest.mark.parametrize(
    ("key", "names", "message"),
    [
        (
            0,
            NAMES,
            r"band 0 is out of range for scene.tif, which has 4 band\(s\) \(1 B02, 2 B03, "
            r"3 B04, 4 B08\); band indices are 1-based \(1\.\.4\)",
        ),
        (5, None, r"band 5 is out of range .*1-based \(1\.\.4\)"),
        (-1, None, r"band -1 is out of range"),
        (
            "B11",
            NAMES,
            r"scene.tif has no band named 'B11'; its bands are 1 B02, 2 B03, 3 B04, 4 B08",
        ),
        ("B04", None, r"scene.tif has no band names.*1-based band indices \(1\.\.4\)"),
        (2.0, NAMES, r"a band is a 1-based index or a name, got 2\.0; .*1 B02"),
        (True, None, r"a band is a 1-based index or a name, got True; use 1\.\.4"),
        (np.bool_(True), None, r"1-based index or a name"),
        (None, None, r"1-based index or a name"),
    ],
)
def test_bad_keys_list_the_valid_bands(key, names, message):
    with pytest.raises(ValueError, match=message):
        resolve_band(key, 4, names, "scene.tif")


def test_parse_bands_splits_typed_text():
    assert parse_bands("") is None and parse_bands(None) is None and parse_bands(" ,; ") is None
    assert parse_bands("B08, B04 B03") == ["B08", "B04", "B03"]
    assert parse_bands("4,3;2\t1") == [4, 3, 2, 1]
    assert parse_bands("4 b03") == [4, "b03"]


def test_raster_stretch_and_array_agree():
    rng = np.random.default_rng(0)
    data = rng.integers(0, 4000, (4, 12, 10)).astype(np.uint16)
    raster = Raster(data=data, crs=None, transform=None, nodata=None, band_names=NAMES, path=())
    by_index = to_model_rgb(data, bands=(4, 3, 2))
    np.testing.assert_array_equal(to_model_rgb(raster, bands=(4, 3, 2)), by_index)
    np.testing.assert_array_equal(to_model_rgb(raster, bands=("b08", "B04", "b03")), by_index)
    np.testing.assert_array_equal(by_index, to_model_rgb(data[[3, 2, 1]]))
    assert raster.band_index("b08") == 4 and raster.band_index(2) == 2
    with pytest.raises(ValueError, match=r"band 9 is out of range .*1-based \(1\.\.4\)"):
        raster.band_index(9)


def test_cli_bands_and_keywords_use_the_shared_parsers():
    from napari_sam3.cli import _query, _scene_settings, build_parser

    args = build_parser().parse_args(
        [
            "segment",
            "x.tif",
            "--models",
            "m",
            "--out",
            "o.gpkg",
            "--keywords",
            "Building; road,building",
            "--bands",
            "4,3,2",
        ]
    )
    assert _query(args, []).keywords == ("Building", "road")
    assert list(_scene_settings(args).bands) == [4, 3, 2]

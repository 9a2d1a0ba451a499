"""The rules behind the conventions, on generated inputs: which pixels are valid, when fill is
inferred, which bands make R, G, B. test_conventions.py builds the files analysts meet."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from napari_sam3.imagery.bands import model_bands
from napari_sam3.imagery.validity import (
    MIN_BORDER_SHARE,
    check_nodata,
    effective_nodata,
    infer_fill,
    invalid_pixels,
)

DTYPES = st.sampled_from(["uint8", "uint16", "int16", "float32"])


@st.composite
def planes_and_nodata(draw):
    dtype = draw(DTYPES)
    count = draw(st.sampled_from([1, 3]))
    shape = (count, draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    values = st.integers(0, 5) if dtype != "float32" else st.sampled_from([0.0, 1.5, 2.0, np.nan])
    data = draw(hnp.arrays(dtype, shape, elements=values))
    nodata = draw(st.sampled_from([None, 0, 2]))
    valid = draw(st.none() | hnp.arrays(bool, shape[1:]))
    return data, nodata, valid


@given(planes_and_nodata())
def test_a_pixel_is_invalid_by_the_mask_by_nodata_in_every_band_or_by_nan(case):
    data, nodata, valid = case
    got = invalid_pixels(list(data), nodata, valid)
    want = np.zeros(data.shape[1:], bool)
    if valid is not None:
        want |= ~valid
    if nodata is not None:
        want |= (data == nodata).all(axis=0)
    if data.dtype.kind == "f":
        want |= np.isnan(data).any(axis=0)
    np.testing.assert_array_equal(want if want.any() else None, got)


@st.composite
def collared(draw):
    """A scene of values 1..200 (never a sentinel) whose outside rows/columns on some sides,
    ``depth`` deep, are ``fill`` in every band."""
    dtype = draw(DTYPES)
    rows, cols = draw(st.integers(6, 30)), draw(st.integers(6, 30))
    data = draw(hnp.arrays(dtype, (3, rows, cols), elements=st.integers(1, 200)))
    fill = draw(st.sampled_from([0, -9999] if dtype in ("int16", "float32") else [0]))
    if dtype != "uint8":
        fill = (
            draw(st.sampled_from([fill, int(np.iinfo(dtype).max)])) if dtype != "float32" else fill
        )
    sides = draw(st.sets(st.sampled_from("tblr"), min_size=0, max_size=4))
    depth = draw(st.integers(1, 3))
    collar = np.zeros((rows, cols), bool)
    collar[:depth] |= "t" in sides
    collar[-depth:] |= "b" in sides
    collar[:, :depth] |= "l" in sides
    collar[:, -depth:] |= "r" in sides
    data[:, collar] = fill
    return data, fill, collar


def _border(mask):
    return np.concatenate([mask[0], mask[-1], mask[1:-1, 0], mask[1:-1, -1]])


@given(collared())
def test_fill_is_the_sentinel_on_enough_of_the_border_and_nothing_else(case):
    data, fill, collar = case
    found = infer_fill(list(data))
    enough = _border(collar).mean() >= MIN_BORDER_SHARE
    if enough:
        assert found is not None and found.value == fill
        assert found.share == pytest.approx(collar.mean())
        assert "in every band and not flagged as nodata" in found.message()
    else:
        assert found is None


@given(collared(), st.integers(0, 2))
def test_a_value_in_only_some_bands_is_not_fill(case, band):
    data, fill, collar = case
    data = data.copy()
    data[band, collar] = 7  # one band disagrees: a dark feature, not fill
    assert infer_fill(list(data)) is None


ROLES = ["red", "green", "blue", "alpha", "undefined", "gray"]


@given(st.permutations(["red", "green", "blue", "undefined", "alpha"]))
def test_declared_colours_are_taken_by_role_wherever_they_sit(roles):
    chosen, why = model_bands(len(roles), roles)
    assert [roles[i] for i in chosen] == ["red", "green", "blue"] and "colour interpretation" in why


@given(st.permutations(["Red", "GREEN", "blue", "nir"]))
def test_band_names_say_the_colours_when_roles_do_not(names):
    chosen, _ = model_bands(4, ["gray", "undefined", "undefined", "undefined"], names)
    assert [names[i].lower() for i in chosen] == ["red", "green", "blue"]


@given(st.integers(2, 13), st.booleans())
def test_an_open_choice_is_refused_and_names_the_bands(count, rgba_array):
    if count == 3 or (rgba_array and count == 4):
        chosen, _ = model_bands(count, four_is_rgba=rgba_array)
        assert chosen == [0, 1, 2]
        return
    roles = ["gray"] + ["undefined"] * (count - 1)
    with pytest.raises(ValueError, match=rf"has {count} bands \(1 b1 \(gray\), 2 b2"):
        model_bands(count, roles, [f"b{i}" for i in range(1, count + 1)])


@pytest.mark.parametrize(
    ("given_", "declared", "used"),
    [
        (None, 0.0, 0.0),
        (None, None, None),
        (5, 0.0, 5.0),
        ("none", 0.0, None),
        (" NONE ", None, None),
        ("-9999", None, -9999.0),
    ],  # fmt: skip
)
def test_which_nodata_value_is_used(given_, declared, used):
    assert effective_nodata(given_, declared) == used


@pytest.mark.parametrize("bad", ["zero", True, [0], "1e"])
def test_a_nodata_that_is_no_number_is_refused(bad):
    with pytest.raises(ValueError, match="nodata is a number such as 0 or -9999, or 'none'"):
        check_nodata(bad)

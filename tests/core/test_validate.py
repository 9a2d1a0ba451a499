"""The one validator of thresholds, counts and boxes (napari_sam3.core.validate)."""

import re

import numpy as np
import pytest

from napari_sam3.core import validate


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 1, np.float32(0.25), np.int64(1)])
def test_unit_interval_closed_accepts(value):
    assert validate.unit_interval("score_thr", value) == float(value)


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (1.5, {}, r"score_thr must be within \[0, 1\], got 1\.5"),
        (-0.01, {}, r"within \[0, 1\], got -0\.01"),
        (0, {"open_low": True}, r"within \(0, 1\], got 0"),
        (1.0, {"open_high": True}, r"within \[0, 1\), got 1\.0"),
        (float("nan"), {}, r"must be a number within \[0, 1\], got nan"),
        ("0.5", {}, r"must be a number within \[0, 1\], got '0\.5'"),
        (True, {}, r"must be a number within \[0, 1\], got True"),
        (None, {}, r"must be a number within \[0, 1\], got None"),
        (0, {"open_low": True, "hint": "(or None)"}, r"got 0 \(or None\)$"),
    ],
)
def test_unit_interval_refuses(value, kwargs, message):
    with pytest.raises(ValueError, match=message):
        validate.unit_interval("score_thr", value, **kwargs)


def test_integers_report_the_real_value_and_the_range():
    assert validate.positive_int("max_det", np.int64(7), validate.INT32_MAX) == 7
    assert validate.integer("overlap", 0, 0) == 0
    with pytest.raises(
        ValueError,
        match=r"max_det must be an integer from 1 to 2147483647, "
        r"got 1000000000000$",
    ):
        validate.positive_int("max_det", 10**12, validate.INT32_MAX)
    with pytest.raises(ValueError, match=r"batch must be a positive integer, got 0$"):
        validate.positive_int("batch", 0)
    for bad in (2.0, True, "4", None, np.float64(3)):
        # numpy 2 writes np.float64(3.0): the repr is matched as text, not as a pattern
        with pytest.raises(
            ValueError, match=f"batch must be a positive integer, got {re.escape(repr(bad))}$"
        ):
            validate.positive_int("batch", bad)
    with pytest.raises(ValueError, match=r"min_area must be a non-negative integer, got -1"):
        validate.integer("min_area", -1, 0)


def test_numbers():
    assert validate.non_negative("offset", 0) == 0.0
    with pytest.raises(ValueError, match=r"offset must be >= 0, got -1\.0"):
        validate.non_negative("offset", -1.0)
    with pytest.raises(ValueError, match=r"must be a finite number, got inf"):
        validate.number("mask_threshold", float("inf"))


def test_boxes():
    np.testing.assert_array_equal(validate.boxes([1, 2, 3, 4]), [[1, 2, 3, 4]])
    assert validate.boxes(np.zeros((0, 4))).shape == (0, 4)
    assert validate.boxes([[0, 0, 0, 0], [1, 1, 5, 2]]).dtype == np.float64
    with pytest.raises(
        ValueError,
        match=r"^boxes must be \[x1, y1, x2, y2\] with shape \(4,\) or "
        r"\(N, 4\), got shape \(1, 3\)",
    ):
        validate.boxes([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"^f: exemplar boxes contain NaN or infinity"):
        validate.boxes([0, 0, np.inf, 1], "exemplar boxes", where="f")
    with pytest.raises(ValueError, match=r"box 1 \[5\.0, 0\.0, 1\.0, 1\.0\] is not .* x1 <= x2"):
        validate.boxes([[0, 0, 1, 1], [5, 0, 1, 1]])
    with pytest.raises(ValueError, match=r"boxes must be numbers"):
        validate.boxes(["a", 0, 1, 2])
    with pytest.raises(ValueError, match=r"shape \(2,\) or \(N, 2\), got shape \(3,\)"):
        validate.points([1, 2, 3])

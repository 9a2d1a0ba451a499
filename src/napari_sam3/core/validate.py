"""Checks of the numbers and boxes callers pass in: one rule each, and messages that say what to pass.

Every threshold, score cut, count and box argument of the library goes through here, so the same
argument gets the same answer from the client, the automatic mask generator, the letterbox and
the dedup. All failures are ValueError naming the argument, the allowed values and the value
actually given (never a value already wrapped by a cast to int32).

- Numbers are Python or numpy ints and floats; bools and strings are refused (``True`` is not 1).
- Integers are Python or numpy integers only (``2.0`` is refused, so nothing is silently rounded).
- Boxes are ``[x1, y1, x2, y2]`` rows, finite, with ``x1 <= x2`` and ``y1 <= y2``.
"""

from __future__ import annotations

import math

import numpy as np

INT32_MAX = 2**31 - 1  # the wire type of counts such as max_det


def number(name: str, value: object) -> float:
    """``value`` as a finite float; refuses bools, strings, NaN and infinities."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise ValueError(f"{name} must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return result


def unit_interval(
    name: str, value: object, *, open_low: bool = False, open_high: bool = False, hint: str = ""
) -> float:
    """``value`` within [0, 1]; ``open_low``/``open_high`` exclude 0 or 1 (e.g. (0, 1] for a dedup
    overlap, where 0 would merge everything). ``hint`` is appended to the message."""
    bounds = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
    hint = f" {hint}" if hint else ""
    try:
        result = number(name, value)
    except ValueError:
        raise ValueError(f"{name} must be a number within {bounds}, got {value!r}{hint}") from None
    above = result > 0 if open_low else result >= 0
    below = result < 1 if open_high else result <= 1
    if not (above and below):
        raise ValueError(f"{name} must be within {bounds}, got {value!r}{hint}")
    return result


def non_negative(name: str, value: object) -> float:
    """``value`` as a finite float >= 0."""
    result = number(name, value)
    if result < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return result


def seconds(name: str, value: object) -> float:
    """``value`` as a finite float > 0: a timeout or a deadline (the one check of them all)."""
    try:
        result = number(name, value)
    except ValueError:
        result = None
    if result is None or result <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return result


def integer(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``low..high`` (inclusive; ``high`` None: no upper bound)."""
    if high is not None:
        allowed = f"an integer from {low} to {high}"
    else:
        allowed = {1: "a positive integer", 0: "a non-negative integer"}.get(
            low, f"an integer >= {low}"
        )
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    result = int(value)
    if result < low or (high is not None and result > high):
        raise ValueError(f"{name} must be {allowed}, got {result}")
    return result


def positive_int(name: str, value: object, upper: int | None = None) -> int:
    """``value`` as an int in ``1..upper`` (``upper`` None: no upper bound)."""
    return integer(name, value, 1, upper)


def boxes(value: object, name: str = "boxes", *, where: str = "") -> np.ndarray:
    """``[x1, y1, x2, y2]`` or a list of them -> float64 ``(N, 4)``, finite, x1 <= x2, y1 <= y2.

    ``where`` (e.g. ``"boxes_to_model"``) prefixes the messages when the caller is not obvious.
    """
    arr = _rows(value, name, where, "[x1, y1, x2, y2]")
    inverted = (arr[:, 2] < arr[:, 0]) | (arr[:, 3] < arr[:, 1])
    if inverted.any():
        i = int(np.flatnonzero(inverted)[0])
        raise ValueError(
            f"{_prefix(where)}box {i} {arr[i].tolist()} is not [x1, y1, x2, y2] with x1 <= x2 "
            "and y1 <= y2; give the top-left corner first"
        )
    return arr


def points(value: object, name: str = "points", *, where: str = "") -> np.ndarray:
    """``[x, y]`` or a list of them -> finite float64 ``(N, 2)``."""
    return _rows(value, name, where, "[x, y]")


def _rows(value: object, name: str, where: str, row: str) -> np.ndarray:
    width = row.count(",") + 1
    prefix = _prefix(where)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{prefix}{name} must be numbers {row}, got {value!r}") from None
    if arr.ndim == 1 and arr.size == width:
        arr = arr[np.newaxis]
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(
            f"{prefix}{name} must be {row} with shape ({width},) or (N, {width}), "
            f"got shape {np.shape(value)}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{prefix}{name} contain NaN or infinity: {arr.tolist()}")
    return arr


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""

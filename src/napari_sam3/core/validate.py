"""Checks of the numbers and boxes callers pass in: one rule each, and messages that say what to pass.

Every threshold, score cut, count and box argument of the library goes through here, so the same
argument gets the same answer from the client, the automatic mask generator, the letterbox and
the dedup. All failures are `InvalidInput` (a ValueError) naming the argument, the allowed values and the value
actually given (never a value already wrapped by a cast to int32).

- Numbers are Python or numpy ints and floats; bools and strings are refused (``True`` is not 1).
- Integers are Python or numpy integers only (``2.0`` is refused, so nothing is silently rounded).
- Boxes are ``[x1, y1, x2, y2]`` rows, finite, with ``x1 <= x2`` and ``y1 <= y2``.
"""

from __future__ import annotations

import math

import numpy as np

if __package__:  # inside napari_sam3
    from napari_sam3.core import contract
    from napari_sam3.core.errors import InvalidInput
else:  # the copies beside the Triton Python models (sam3-export copies this file there)
    import contract
    from errors import InvalidInput

INT32_MAX = 2**31 - 1  # the wire type of counts such as max_det


def number(name: str, value: object) -> float:
    """``value`` as a finite float; refuses bools, strings, NaN and infinities."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise InvalidInput(f"{name} must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise InvalidInput(f"{name} must be a finite number, got {value!r}")
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
        raise InvalidInput(
            f"{name} must be a number within {bounds}, got {value!r}{hint}"
        ) from None
    above = result > 0 if open_low else result >= 0
    below = result < 1 if open_high else result <= 1
    if not (above and below):
        raise InvalidInput(f"{name} must be within {bounds}, got {value!r}{hint}")
    return result


def non_negative(name: str, value: object) -> float:
    """``value`` as a finite float >= 0."""
    result = number(name, value)
    if result < 0:
        raise InvalidInput(f"{name} must be >= 0, got {value!r}")
    return result


def seconds(name: str, value: object) -> float:
    """``value`` as a finite float > 0: a timeout or a deadline (the one check of them all)."""
    try:
        result = number(name, value)
    except ValueError:
        result = None
    if result is None or result <= 0:
        raise InvalidInput(f"{name} must be a positive number of seconds, got {value!r}")
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
        raise InvalidInput(f"{name} must be {allowed}, got {value!r}")
    result = int(value)
    if result < low or (high is not None and result > high):
        raise InvalidInput(f"{name} must be {allowed}, got {result}")
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
        raise InvalidInput(
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
        raise InvalidInput(f"{prefix}{name} must be numbers {row}, got {value!r}") from None
    if arr.ndim == 1 and arr.size == width:
        arr = arr[np.newaxis]
    if arr.ndim != 2 or arr.shape[1] != width:
        raise InvalidInput(
            f"{prefix}{name} must be {row} with shape ({width},) or (N, {width}), "
            f"got shape {np.shape(value)}"
        )
    if not np.isfinite(arr).all():
        raise InvalidInput(f"{prefix}{name} contain NaN or infinity: {arr.tolist()}")
    return arr


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


# ----------------------------------------------------------------------------- bounds
# What one call or one request may ask for (docs/serving.md, "Bounds"). The client checks them
# before it sends and every Python model before it computes, so a request past a bound is
# refused at once: it never holds the server, and so never delays another client's request.

MAX_POINTS_PER_SIDE = 64  # everything mode: a grid of at most 64 x 64 clicks
MAX_GRID_PROMPTS = MAX_POINTS_PER_SIDE**2  # grid prompts in one interactive request
MAX_IMAGE_PIXELS = 2**27  # an image a client holds whole (~11585 x 11585); larger: by tiles
MAX_STRING_CHARS = 128  # cache_op, image_id
VOCAB_SIZE = contract.EOT_TOKEN + 1  # token ids 0..49407 (CLIP BPE)
CLICK_LABELS = (-1, 0, 1)  # a click's label: padding, negative, positive


def points_per_side(value: object) -> int:
    """Everything mode's grid side: 1..MAX_POINTS_PER_SIDE."""
    return integer("points_per_side", value, 1, MAX_POINTS_PER_SIDE)


MIN_IMAGE_SIDE = 4  # pixels: below, an image is too small to segment (and its band axis unclear)


def image_side(rows: int, cols: int, what: str = "the image") -> None:
    """Refuse an image smaller than MIN_IMAGE_SIDE pixels on a side."""
    if min(int(rows), int(cols)) < MIN_IMAGE_SIDE:
        raise InvalidInput(
            f"{what} is {cols} x {rows} px: too small to segment (at least {MIN_IMAGE_SIDE} x "
            f"{MIN_IMAGE_SIDE} px)"
        )


def image_pixels(rows: int, cols: int, what: str = "the image") -> None:
    """Refuse an image too large to hold whole in memory (`MAX_IMAGE_PIXELS`), before reading it."""
    if int(rows) * int(cols) > MAX_IMAGE_PIXELS:
        raise InvalidInput(
            f"{what} is {cols} x {rows} px ({int(rows) * int(cols) / 1e6:.0f} Mpx); one image is "
            f"held whole in memory, at most {MAX_IMAGE_PIXELS / 1e6:.0f} Mpx: segment it tile by "
            "tile with napari_sam3.segment_scene(client, path) (`napari-sam3 segment`), or pass a "
            "part: read_raster(path, window=..., max_size=...), or a slice of the array (a "
            "memmap reads only the slice)"
        )


def exemplar_boxes(value: object, *, size: tuple[float, float] | None = None) -> np.ndarray:
    """Exemplar boxes: finite rows [x1, y1, x2, y2] with x2 > x1 and y2 > y1; with ``size``
    (cols, rows) of the image, as `boxes_on_image`: clipped to it, none wholly outside."""
    arr = boxes(value, "exemplar boxes")
    flat = (arr[:, 2] <= arr[:, 0]) | (arr[:, 3] <= arr[:, 1])
    if flat.any():
        i = int(np.flatnonzero(flat)[0])
        raise InvalidInput(
            f"exemplar box {i} {arr[i].tolist()} has zero area (need x2 > x1 and y2 > y1): "
            "draw a box around one example object"
        )
    return arr if size is None else boxes_on_image(arr, size, "exemplar box")


def boxes_on_image(arr: np.ndarray, size: tuple[float, float], what: str = "box") -> np.ndarray:
    """Boxes drawn on an image of ``size`` (cols, rows), in its pixels, clipped to it: the part
    of a box over the image is what it shows (a box dragged past the edge is common). A box
    with no area on the image says nothing and is refused."""
    cols, rows = size
    over = (arr[:, 2] > 0) & (arr[:, 0] < cols) & (arr[:, 3] > 0) & (arr[:, 1] < rows)
    if not over.all():
        i = int(np.flatnonzero(~over)[0])
        raise InvalidInput(
            f"{what} {i} {arr[i].tolist()} (xyxy, image pixels) lies wholly outside the image "
            f"of {cols:g} x {rows:g} pixels (width x height); draw it over the image"
        )
    return np.column_stack(
        [arr[:, 0].clip(0, cols), arr[:, 1].clip(0, rows), arr[:, 2].clip(0, cols),
         arr[:, 3].clip(0, rows)]
    )  # fmt: skip


def exemplar_labels(value: object, n: int) -> np.ndarray:
    """One label per exemplar box: 1 (positive) or 0 (negative)."""
    try:
        labels = np.asarray(value)
        ok = labels.shape == (n,) and labels.dtype.kind in "biuf" and np.isin(labels, (0, 1)).all()
    except (TypeError, ValueError):
        ok = False
    if not ok:
        shown = labels.tolist() if isinstance(labels, np.ndarray) else value
        raise InvalidInput(
            f"exemplar_labels must be one 1 (positive) or 0 (negative) per box; "
            f"got {shown} for {n} boxes"
        )
    return labels.astype(np.int64)


def concept_tensors(tokens: np.ndarray, padding: np.ndarray, where: str = "concept") -> None:
    """A concept's values: finite tokens, and at least one token that is not padding."""
    tokens, padding = np.asarray(tokens), np.asarray(padding)
    if not np.isfinite(tokens).all():
        what = "every value is NaN" if np.isnan(tokens).all() else "it holds NaN or infinity"
        raise InvalidInput(
            f"{where}: {contract.CONCEPT_TOKENS_NAME} is not a usable concept ({what}); "
            "re-encode the exemplars"
        )
    if padding.reshape(len(padding), -1).all(axis=-1).any() if padding.ndim else padding.all():
        raise InvalidInput(
            f"{where}: every concept token is marked as padding, so the concept says nothing; "
            "re-encode the exemplars"
        )


# ----------------------------------------------------------------------------- model requests


def model_inputs(inputs: dict, manifest: contract.Manifest | None = None) -> None:
    """Every tensor of one model request, by name, before anything is computed or allocated.

    The one check of what reaches a model: `Sam3Client` runs it on what it sends, every Python
    model (`sam3_cached`, `sam3_multi`, `sam3_postprocess`, and each graph of the python
    flavor) on what it receives, so a raw Triton client gets the client's own message. Rules:
    dtype, shape (and the bounds above), finite values, coordinates inside the model input,
    labels in their set, token ids in the vocabulary with an end token, concepts that are not
    all padding. ``manifest`` (the model's) adds the exact sizes; without it the sizes are not
    checked. Tensors no rule names must be finite if they are floats.
    """
    size = manifest.image_size if manifest is not None else None
    if size is None and contract.IMAGES in inputs and np.ndim(inputs[contract.IMAGES]) == 4:
        size = int(np.shape(inputs[contract.IMAGES])[-1])
    for name, value in inputs.items():
        rule = _RULES.get(name)
        if rule is not None:
            rule(name, value, manifest)
        else:
            arr = np.asarray(value)
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise InvalidInput(f"{name} holds NaN or infinity")
    op = _text(contract.CACHE_OP, inputs[contract.CACHE_OP]) if contract.CACHE_OP in inputs else ""
    if op == "ground" and contract.TOKEN_IDS not in inputs:
        raise InvalidInput(
            f"a ground request needs {contract.TOKEN_IDS} [N, {contract.TEXT_TOKENS}]: the "
            "tokenized prompts (napari_sam3's tokenize())"
        )
    _exemplar_slots(inputs, size, manifest)
    _concepts(inputs, manifest)
    _click(inputs, size)
    _grid(inputs, size, manifest)


def _shape(name: str, arr: np.ndarray, kinds: str, what: str, ok: bool) -> None:
    if arr.dtype.kind not in kinds or not ok:
        raise InvalidInput(f"{name} must be {what}, got {arr.dtype} {list(arr.shape)}")


def _text(name: str, value: object) -> str:
    arr = np.asarray(value, dtype=object).reshape(-1)
    if arr.size != 1:
        raise InvalidInput(f"{name} must hold one string, got {arr.size} values")
    item = arr[0]
    try:
        text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} is not UTF-8 text") from None
    if len(text) > MAX_STRING_CHARS:
        raise InvalidInput(f"{name} is {len(text)} characters long; at most {MAX_STRING_CHARS}")
    return text


def _check_string(name: str, value: object, manifest) -> None:
    text = _text(name, value)
    if name == contract.IMAGE_ID and text and not all(c in "0123456789abcdef" for c in text):
        raise InvalidInput(
            f"{name} must be the hex key of an image (napari_sam3.runtime.cached.image_key), "
            f"got {text[:40]!r}"
        )


def _check_images(name: str, value: object, manifest) -> None:
    arr = np.asarray(value)
    s = manifest.image_size if manifest is not None else (arr.shape[-1] if arr.ndim == 4 else 0)
    _shape(
        name,
        arr,
        "u",
        f"uint8 [1, 3, {s or 'S'}, {s or 'S'}] (the letterboxed model input)",
        arr.dtype == np.uint8 and arr.shape == (1, 3, s, s) and s > 0,
    )


def _check_tokens(name: str, value: object, manifest) -> None:
    arr = np.asarray(value)
    most = manifest.max_keywords if manifest is not None else contract.MAX_KEYWORDS
    _shape(
        name,
        arr,
        "iu",
        f"integers [N, {contract.TEXT_TOKENS}] with 1 <= N <= {most}",
        arr.ndim == 2 and 1 <= len(arr) <= most and arr.shape[1] == contract.TEXT_TOKENS,
    )
    for i, row in enumerate(arr.astype(np.int64)):
        bad = row[(row < 0) | (row >= VOCAB_SIZE)]
        if bad.size:
            raise InvalidInput(
                f"{name} row {i} holds {bad[0]}, outside the vocabulary 0..{VOCAB_SIZE - 1}; make "
                "token ids with napari_sam3's tokenize()"
            )
        if not (row == contract.EOT_TOKEN).any():
            raise InvalidInput(
                f"{name} row {i} has no end token {contract.EOT_TOKEN}; make token ids with "
                "napari_sam3's tokenize()"
            )


def _one_value(name: str, value: object) -> object:
    arr = np.asarray(value).reshape(-1)
    if arr.size != 1:
        raise InvalidInput(f"{name} must hold one value, got {arr.size}")
    return arr[0]


def _check_score_thr(name: str, value: object, manifest) -> None:
    unit_interval(name, _one_value(name, value))


def _check_mask_thr(name: str, value: object, manifest) -> None:
    unit_interval(name, _one_value(name, value), open_low=True, open_high=True)


def _check_max_det(name: str, value: object, manifest) -> None:
    positive_int(name, _one_value(name, value), INT32_MAX)


def _check_finite(name: str, value: object, manifest) -> None:
    arr = np.asarray(value)
    _shape(name, arr, "f", "floats", True)
    if not np.isfinite(arr).all():
        raise InvalidInput(f"{name} holds NaN or infinity")


def _check_float(name: str, value: object, manifest) -> None:
    """Floats; their values are checked with the tensors they go with (below)."""
    _shape(name, np.asarray(value), "f", "floats", True)


def _check_bool(name: str, value: object, manifest) -> None:
    arr = np.asarray(value)
    _shape(name, arr, "b", "booleans", True)


def _check_int(name: str, value: object, manifest) -> None:
    arr = np.asarray(value)
    _shape(name, arr, "iu", "integers", True)


def _check_click_labels(name: str, value: object, manifest) -> None:
    arr = np.asarray(value)
    _shape(name, arr, "iuf", "numbers", True)
    bad = arr[~np.isin(arr, CLICK_LABELS)]
    if bad.size:
        raise InvalidInput(
            f"{name} must be 1 (positive), 0 (negative) or -1 (no point), got {bad.reshape(-1)[0]}"
        )


_RULES = {
    contract.CACHE_OP: _check_string,
    contract.IMAGE_ID: _check_string,
    contract.IMAGES: _check_images,
    contract.TOKEN_IDS: _check_tokens,
    contract.SCORE_THR: _check_score_thr,
    contract.MASK_THR: _check_mask_thr,
    contract.MAX_DET: _check_max_det,
    contract.EXEMPLAR_BOXES: _check_float,
    contract.EXEMPLAR_LABELS: _check_int,
    contract.EXEMPLAR_VALID: _check_bool,
    contract.CONCEPT_TOKENS_NAME: _check_float,
    contract.CONCEPT_PADDING_MASK: _check_bool,
    contract.PVS_POINT_COORDS: _check_finite,
    contract.PVS_POINT_LABELS: _check_click_labels,
    contract.PVS_BOX: _check_finite,
    contract.PVS_HAS_BOX: _check_bool,
    contract.PVS_MASK_INPUT: _check_finite,
    contract.PVS_HAS_MASK: _check_bool,
    contract.PVS_GRID_COORDS: _check_finite,
    contract.PVS_GRID_LABELS: _check_click_labels,
}


def _exemplar_slots(inputs: dict, size: int | None, manifest) -> None:
    names = (contract.EXEMPLAR_BOXES, contract.EXEMPLAR_LABELS, contract.EXEMPLAR_VALID)
    present = [n for n in names if n in inputs]
    if not present:
        return
    if len(present) != len(names):
        raise InvalidInput(f"send all of {', '.join(names)}, or none")
    bxs, labels, valid = (np.asarray(inputs[n]) for n in names)
    k = manifest.exemplar_slots if manifest is not None else (bxs.shape[1] if bxs.ndim == 3 else 0)
    most = manifest.max_keywords if manifest is not None else contract.MAX_KEYWORDS
    rows = len(bxs) if bxs.ndim == 3 else 0
    if not (
        bxs.shape == (rows, k, 4)
        and labels.shape == (rows, k)
        and valid.shape == (rows, k)
        and 1 <= rows <= most
        and k > 0
    ):
        raise InvalidInput(
            f"exemplar slots must be {names[0]} [R, {k or 'K'}, 4], {names[1]} and {names[2]} "
            f"[R, {k or 'K'}] with 1 <= R <= {most}; got {list(bxs.shape)}, {list(labels.shape)}, "
            f"{list(valid.shape)}"
        )
    boxes(bxs.reshape(-1, 4), "exemplar boxes")  # finite, padding slots too
    for r in range(rows):
        used = valid[r].astype(bool)
        if used.any():
            exemplar_boxes(bxs[r][used])
            _inside_input("exemplar box", bxs[r][used], size)
            exemplar_labels(labels[r][used], int(used.sum()))


def _inside_input(what: str, arr: np.ndarray, size: int | None) -> None:
    """Boxes on the wire lie inside the model input: the client clips boxes to the image
    (`boxes_on_image`) before it letterboxes them, so only a raw client sends one outside."""
    if size is None:
        return
    tol = 1e-3  # float32 rounding of boxes on the edge
    out = (arr[:, :2] < -tol).any(axis=1) | (arr[:, 2:] > size + tol).any(axis=1)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise InvalidInput(
            f"{what} {i} {arr[i].tolist()} reaches outside the {size} x {size} model input; "
            "send boxes in the model input's pixels (napari_sam3's Letterbox.boxes_to_model)"
        )


def _concepts(inputs: dict, manifest) -> None:
    names = contract.CONCEPT_OUTPUTS
    present = [n for n in names if n in inputs]
    if not present:
        return
    if len(present) != len(names):
        raise InvalidInput(f"send both {names[0]} and {names[1]}, or neither")
    tokens, padding = np.asarray(inputs[names[0]]), np.asarray(inputs[names[1]])
    t = manifest.sizes.concept_tokens if manifest is not None else None
    d = manifest.sizes.d_model if manifest is not None else None
    most = manifest.max_keywords if manifest is not None else contract.MAX_KEYWORDS
    c = len(tokens) if tokens.ndim == 3 else 0
    ok = (
        1 <= c <= most
        and padding.shape == tokens.shape[:2]
        and (t is None or tokens.shape[1] == t)
        and (d is None or tokens.shape[2] == d)
    )
    if not ok:
        raise InvalidInput(
            f"concepts must be {names[0]} [C, {t or 'T'}, {d or 'D'}] and {names[1]} "
            f"[C, {t or 'T'}] with 1 <= C <= {most}; got {list(tokens.shape)} and "
            f"{list(padding.shape)}: re-encode the exemplars with this model"
        )
    for i in range(c):
        concept_tensors(tokens[i : i + 1], padding[i : i + 1], f"concept {i}")


def _inside(name: str, coords: np.ndarray, size: int | None) -> None:
    if size is None or not coords.size:
        return
    tol = 1e-3
    out = (coords < -tol) | (coords > size + tol)
    if out.any():
        where = np.argwhere(out.any(axis=-1))[0].tolist()
        raise InvalidInput(
            f"{name}{where} {coords[tuple(where)].tolist()} lies outside the {size} x {size} "
            "model input"
        )


def _click(inputs: dict, size: int | None) -> None:
    coords = inputs.get(contract.PVS_POINT_COORDS)
    if coords is not None:
        coords = np.asarray(coords)
        labels = inputs.get(contract.PVS_POINT_LABELS)
        if (
            coords.ndim != 3
            or coords.shape[-1] != 2
            or (labels is not None and np.shape(labels) != coords.shape[:2])
        ):
            raise InvalidInput(
                f"{contract.PVS_POINT_COORDS} must be [B, P, 2] with {contract.PVS_POINT_LABELS} "
                f"[B, P]; got {list(coords.shape)} and {list(np.shape(labels))}"
            )
        used = coords if labels is None else coords[np.asarray(labels) >= 0]
        _inside(contract.PVS_POINT_COORDS, used.reshape(1, -1, 2), size)
    box, has_box = inputs.get(contract.PVS_BOX), inputs.get(contract.PVS_HAS_BOX)
    if box is not None and has_box is not None:
        box = np.asarray(box)
        if box.ndim != 2 or box.shape[-1] != 4 or np.shape(has_box) != box.shape[:1]:
            raise InvalidInput(
                f"{contract.PVS_BOX} must be [B, 4] with {contract.PVS_HAS_BOX} [B]; got "
                f"{list(box.shape)} and {list(np.shape(has_box))}"
            )
        used = box[np.asarray(has_box, bool)]
        if len(used):
            boxes(used, contract.PVS_BOX)
            flat = (used[:, 2] <= used[:, 0]) | (used[:, 3] <= used[:, 1])
            if flat.any():
                raise InvalidInput(
                    f"{contract.PVS_BOX} {used[flat][0].tolist()} has zero area (need x2 > x1 "
                    "and y2 > y1)"
                )
            _inside(contract.PVS_BOX, used.reshape(-1, 2, 2), size)


def _grid(inputs: dict, size: int | None, manifest) -> None:
    if contract.PVS_GRID_COORDS not in inputs:
        return
    coords = np.asarray(inputs[contract.PVS_GRID_COORDS])
    labels = inputs.get(contract.PVS_GRID_LABELS)
    p = manifest.pvs_grid_points if manifest is not None else None
    if (
        coords.ndim != 3
        or coords.shape[-1] != 2
        or (p is not None and coords.shape[1] != p)
        or labels is None
        or np.shape(labels) != coords.shape[:2]
    ):
        raise InvalidInput(
            f"grid prompts are {contract.PVS_GRID_COORDS} [N, {p or 'P'}, 2] with "
            f"{contract.PVS_GRID_LABELS} [N, {p or 'P'}]; got {list(coords.shape)} and "
            f"{list(np.shape(labels)) if labels is not None else 'none'}"
        )
    if len(coords) > MAX_GRID_PROMPTS:
        raise InvalidInput(
            f"{contract.PVS_GRID_COORDS} holds {len(coords)} prompts; at most {MAX_GRID_PROMPTS} "
            f"per request (points_per_side up to {MAX_POINTS_PER_SIDE}): send a larger grid in "
            "several requests"
        )
    _inside(contract.PVS_GRID_COORDS, coords, size)

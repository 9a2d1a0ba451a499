"""The condensed RLE codec: round trips, summaries from the runs, the byte format, corruption."""

from __future__ import annotations

import ast
import importlib.util
import pickle
import shutil
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import napari_sam3.masks.rle as rle_module
from napari_sam3.core import errors
from napari_sam3.masks import (
    RleMask,
    RleMasks,
    decode_mask,
    decode_masks,
    encode_mask,
    encode_masks,
    paint_labels,
)

from .._required import require

# ----------------------------------------------------------------------------- references


def leb128(value: int) -> bytes:
    """Unsigned LEB128, written from the description in docs/rle.md."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def build_payload(n: int, h: int, w: int, values: list[int], **header: int) -> bytes:
    """A payload laid out by hand from docs/rle.md, with a correct checksum unless overridden."""
    body = b"".join(leb128(v) for v in values)
    head = struct.pack(
        "<4sBBHIII",
        header.get("magic", b"S3RL"),
        header.get("version", 1),
        header.get("flags", 0),
        header.get("reserved", 0),
        n,
        h,
        w,
    )
    crc = header.get("crc", zlib.crc32(body, zlib.crc32(head)))
    return head + struct.pack("<IQ", crc, header.get("body_len", len(body))) + body


def reference_runs(mask: np.ndarray) -> list[int]:
    """Runs of one mask by walking its pixels in row-major order, background first."""
    runs, current, length = [], False, 0
    for pixel in mask.ravel().tolist():
        if pixel == current:
            length += 1
        else:
            runs.append(length)
            current, length = pixel, 1
    runs.append(length)
    if mask.size == 0:
        return []
    return runs


def reference_bbox(mask: np.ndarray) -> list[int]:
    ys, xs = np.nonzero(mask)
    if ys.size == 0:
        return [0, 0, 0, 0]
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def patterned(kind: str, n: int, h: int, w: int) -> np.ndarray:
    yy, xx = np.indices((h, w))
    single = {
        "empty": np.zeros((h, w), bool),
        "full": np.ones((h, w), bool),
        "checker": (yy + xx) % 2 == 0,
        "checker_odd": (yy + xx) % 2 == 1,
        "rows": yy % 2 == 0,
        "cols": xx % 3 == 0,
        "last_pixel": (yy == h - 1) & (xx == w - 1),
        "first_pixel": (yy == 0) & (xx == 0),
        "border": (yy == 0) | (xx == 0) | (yy == h - 1) | (xx == w - 1),
    }[kind]
    return np.repeat(single[np.newaxis], n, axis=0)


mask_batches = hnp.arrays(
    dtype=np.bool_,
    shape=st.tuples(st.integers(0, 4), st.integers(0, 9), st.integers(0, 9)),
)
# Sparse batches with long runs, the shape of real segmentation output.
sparse_batches = st.builds(
    lambda n, h, w, seed, p: np.random.default_rng(seed).random((n, h, w)) < p,
    st.integers(0, 5),
    st.integers(1, 40),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.0, 0.01, 0.2, 0.5, 0.9, 1.0]),
)


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=300, deadline=None)
@given(st.one_of(mask_batches, sparse_batches))
def test_round_trip_property(masks: np.ndarray) -> None:
    payload = encode_masks(masks)
    decoded = decode_masks(payload)
    assert len(decoded) == masks.shape[0]
    assert decoded.shape == masks.shape[1:]
    dense = decoded.to_dense()
    assert dense.dtype == np.bool_ and dense.shape == masks.shape
    np.testing.assert_array_equal(dense, masks)
    for i in range(len(decoded)):
        np.testing.assert_array_equal(decoded[i], masks[i])
        assert decoded.mask(i).runs.tolist() == reference_runs(masks[i])
    assert decoded.to_bytes() == payload


@settings(max_examples=200, deadline=None)
@given(st.one_of(mask_batches, sparse_batches))
def test_areas_and_bboxes_match_dense(masks: np.ndarray) -> None:
    decoded = decode_masks(encode_masks(masks))
    np.testing.assert_array_equal(decoded.areas, masks.sum(axis=(1, 2)))
    expected = [reference_bbox(m) for m in masks]
    assert decoded.bboxes.tolist() == expected
    for i, mask in enumerate(decoded.as_list()):
        assert mask.area == int(masks[i].sum())
        assert list(mask.bbox) == expected[i]


@pytest.mark.parametrize(
    "kind",
    [
        "empty",
        "full",
        "checker",
        "checker_odd",
        "rows",
        "cols",
        "last_pixel",
        "first_pixel",
        "border",
    ],
)
@pytest.mark.parametrize("hw", [(1, 1), (1, 17), (17, 1), (6, 7), (32, 32)])
def test_round_trip_patterns(kind: str, hw: tuple[int, int]) -> None:
    masks = patterned(kind, 3, *hw)
    decoded = decode_masks(encode_masks(masks))
    np.testing.assert_array_equal(decoded.to_dense(), masks)
    np.testing.assert_array_equal(decoded.areas, masks.sum(axis=(1, 2)))
    assert decoded.bboxes.tolist() == [reference_bbox(m) for m in masks]


def test_empty_batch() -> None:
    masks = np.zeros((0, 12, 34), dtype=bool)
    decoded = decode_masks(encode_masks(masks))
    assert len(decoded) == 0
    assert decoded.shape == (12, 34)
    assert decoded.to_dense().shape == (0, 12, 34)
    assert decoded.areas.shape == (0,)
    assert decoded.bboxes.shape == (0, 4)
    assert decoded.as_list() == []


def test_zero_pixel_masks() -> None:
    for shape in [(2, 0, 5), (2, 5, 0), (3, 0, 0)]:
        masks = np.zeros(shape, dtype=bool)
        decoded = decode_masks(encode_masks(masks))
        assert len(decoded) == shape[0]
        assert decoded.to_dense().shape == shape
        assert decoded.areas.tolist() == [0] * shape[0]
        assert decoded.counts.tolist() == [0] * shape[0]


def test_non_contiguous_input() -> None:
    rng = np.random.default_rng(3)
    base = rng.random((4, 20, 30)) < 0.3
    view = base[::2, ::-1, 1::3]
    np.testing.assert_array_equal(decode_masks(encode_masks(view)).to_dense(), view)


def test_single_mask_helpers() -> None:
    mask = np.zeros((9, 11), dtype=bool)
    mask[2:5, 3:10] = True
    payload = encode_mask(mask)
    single = decode_mask(payload)
    assert isinstance(single, RleMask)
    assert single.shape == (9, 11)
    assert single.area == 21
    assert single.bbox == (3, 2, 10, 5)
    np.testing.assert_array_equal(single.to_dense(), mask)
    np.testing.assert_array_equal(np.asarray(single), mask)
    assert np.asarray(single, dtype=np.uint8).dtype == np.uint8
    assert single.to_bytes() == payload
    assert RleMask.from_dense(mask) == single
    with pytest.raises(ValueError, match="exactly 1"):
        decode_mask(encode_masks(np.zeros((2, 3, 3), dtype=bool)))


# ----------------------------------------------------------------------------- the byte format


def test_format_matches_documented_layout() -> None:
    masks = np.array([[[0, 1, 1], [1, 0, 0]]], dtype=bool)
    expected = build_payload(1, 2, 3, [3, 1, 3, 2])
    assert encode_masks(masks) == expected
    assert expected[32:] == bytes([0x03, 0x01, 0x03, 0x02])


def test_multi_byte_varints_and_masks_in_order() -> None:
    masks = np.zeros((3, 1, 300), dtype=bool)
    masks[0, 0, 200:] = True  # runs 200, 100
    masks[1, 0, :] = True  # runs 0, 300
    # mask 2 empty: run 300
    payload = encode_masks(masks)
    assert payload == build_payload(3, 1, 300, [2, 2, 1, 200, 100, 0, 300, 300])
    assert b"\xc8\x01" in payload[32:]  # 200 in LEB128, as in docs/rle.md
    np.testing.assert_array_equal(decode_masks(payload).to_dense(), masks)


def test_hand_built_payload_decodes() -> None:
    # 2 masks of 4x5: a 2x2 square at (1, 1) and the whole last row.
    square = [6, 2, 3, 2, 7]
    last_row = [15, 5]
    decoded = decode_masks(build_payload(2, 4, 5, [5, 2, *square, *last_row]))
    expected = np.zeros((2, 4, 5), dtype=bool)
    expected[0, 1:3, 1:3] = True
    expected[1, 3, :] = True
    np.testing.assert_array_equal(decoded.to_dense(), expected)
    assert decoded.bboxes.tolist() == [[1, 1, 3, 3], [0, 3, 5, 4]]


def test_compression_of_realistic_masks() -> None:
    """Blob and rectangle masks must take well under 2 % of their raw uint8 size."""
    rng = np.random.default_rng(7)
    n, size = 24, 512
    masks = np.zeros((n, size, size), dtype=bool)
    yy, xx = np.ogrid[:size, :size]
    for i in range(n):
        cy, cx = rng.uniform(0, size, 2)
        ry, rx = rng.uniform(4, size / 4, 2)
        if i % 2:
            masks[i, int(max(cy - ry, 0)) : int(cy + ry), int(max(cx - rx, 0)) : int(cx + rx)] = (
                True
            )
        else:
            masks[i] = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
    payload = encode_masks(masks)
    assert len(payload) < 0.02 * masks.size
    np.testing.assert_array_equal(decode_masks(payload).to_dense(), masks)


# ----------------------------------------------------------------------------- batch objects


def _some_masks(seed: int = 0, n: int = 6, h: int = 13, w: int = 17) -> np.ndarray:
    rng = np.random.default_rng(seed)
    masks = np.zeros((n, h, w), dtype=bool)
    for i in range(n):
        y0, y1 = sorted(rng.integers(0, h + 1, 2))
        x0, x1 = sorted(rng.integers(0, w + 1, 2))
        masks[i, y0:y1, x0:x1] = rng.random((y1 - y0, x1 - x0)) < 0.8
    return masks


def test_take_stack_and_per_mask_objects() -> None:
    masks = _some_masks()
    batch = decode_masks(encode_masks(masks))
    picked = batch.take([4, 0, -1, 4])
    np.testing.assert_array_equal(picked.to_dense(), masks[[4, 0, 5, 4]])
    assert len(batch.take([])) == 0
    items = batch.as_list()
    assert [m.area for m in items] == masks.sum(axis=(1, 2)).tolist()
    assert all(np.shares_memory(m.runs, batch.runs) for m in items if m.runs.size)
    restacked = RleMasks.stack(items[::-1])
    np.testing.assert_array_equal(restacked.to_dense(), masks[::-1])
    assert len(RleMasks.stack([], shape=(13, 17))) == 0
    with pytest.raises(ValueError, match="different shapes"):
        RleMasks.stack([items[0], RleMask.from_dense(np.zeros((2, 2), bool))])
    with pytest.raises(ValueError, match="explicit shape"):
        RleMasks.stack([])
    with pytest.raises(ValueError, match="integers"):
        batch.take([0.5])
    with pytest.raises(ValueError, match="out of range"):
        batch.take([6])
    with pytest.raises(IndexError):
        batch[6]
    np.testing.assert_array_equal(batch[-1], masks[-1])


def test_rle_mask_from_runs_is_validated() -> None:
    mask = RleMask([1, 3, 2], (2, 3))
    np.testing.assert_array_equal(mask.to_dense(), [[0, 1, 1], [1, 0, 0]])
    assert RleMask([], (0, 4)).to_dense().shape == (0, 4)
    for runs, match in [
        ([1, 3, 1], "cover 5 pixels"),
        ([1, 0, 5], "zero-length run"),
        ([-1, 7], "negative"),
        ([], "no runs"),
        ([1.5, 4.5], "integers"),
        ([[1, 5]], "1-D"),
    ]:
        with pytest.raises(ValueError, match=match):
            RleMask(runs, (2, 3))
    with pytest.raises(ValueError, match="non-negative"):
        RleMask([6], (-2, -3))


def test_runs_are_read_only() -> None:
    batch = decode_masks(encode_masks(_some_masks()))
    with pytest.raises(ValueError):
        batch.runs[0] = 5
    with pytest.raises(ValueError):
        batch.mask(0).runs[0] = 5


def test_pickled_mask_carries_only_its_runs() -> None:
    masks = _some_masks(seed=1, n=60, h=64, w=64)
    batch = decode_masks(encode_masks(masks))
    one = batch.mask(3)
    restored = pickle.loads(pickle.dumps(one))
    assert restored == one
    np.testing.assert_array_equal(restored.to_dense(), masks[3])
    assert len(pickle.dumps(one)) < batch.runs.nbytes / 4


def test_pandas_column_of_masks() -> None:
    pd = require("pandas")
    masks = _some_masks(seed=2, n=8)
    batch = decode_masks(encode_masks(masks))
    frame = pd.DataFrame({"mask": batch.as_list(), "area": batch.areas})
    assert (frame["mask"].map(lambda m: m.area) == frame["area"]).all()
    np.testing.assert_array_equal(np.asarray(frame["mask"].iloc[5]), masks[5])


def test_paint_labels_paints_later_masks_on_top() -> None:
    masks = _some_masks(seed=4, n=7)
    batch = decode_masks(encode_masks(masks))
    expected = np.zeros(masks.shape[1:], dtype=np.int32)
    for i, m in enumerate(masks):
        expected[m] = i + 1
    shape = masks.shape[1:]
    np.testing.assert_array_equal(paint_labels(batch, shape), expected)
    # The batch's vectorised fill and the crop loop over its masks paint the same image.
    np.testing.assert_array_equal(paint_labels(batch.as_list(), shape), expected)
    values = np.arange(10, 17)
    expected_values = np.zeros_like(expected)
    for v, m in zip(values, masks, strict=True):
        expected_values[m] = v
    np.testing.assert_array_equal(paint_labels(batch, shape, labels=values), expected_values)
    with pytest.raises(ValueError, match="labels"):
        paint_labels(batch, shape, labels=[1, 2])


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (np.zeros((2, 3, 3), dtype=np.uint8), "dtype bool"),
        (np.zeros((2, 3, 3), dtype=np.float32), "dtype bool"),
        (np.zeros((3, 3), dtype=bool), "3-D"),
        (np.zeros((1, 2, 3, 3), dtype=bool), "3-D"),
        ([[[True]]], "numpy array"),
    ],
)
def test_encode_rejects_bad_input(bad: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_masks(bad)  # type: ignore[arg-type]


def test_encode_mask_rejects_3d() -> None:
    with pytest.raises(ValueError, match="2-D"):
        encode_mask(np.zeros((1, 3, 3), dtype=bool))


def _valid_payload() -> bytes:
    return encode_masks(_some_masks(seed=5, n=3, h=7, w=9))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"", "truncated"),
        (b"S3RL\x01", "truncated"),
        (build_payload(1, 2, 2, [1, 4], magic=b"XXXX"), "magic"),
        (build_payload(1, 2, 2, [1, 4], version=2), "version"),
        (build_payload(1, 2, 2, [1, 4], flags=1), "flags"),
        (build_payload(1, 2, 2, [1, 4], reserved=7), "flags"),
        (build_payload(1, 2, 2, [1, 4], crc=0), "checksum"),
        (build_payload(1, 2, 2, [1, 4], body_len=5), "truncated"),
        (build_payload(1, 2, 2, [1, 4]) + b"\x00", "trailing"),
        (build_payload(1, 2, 2, [1, 3]), "cover 3 pixels"),
        (build_payload(1, 2, 2, [2, 3, 2]), "cover 5 pixels"),
        (build_payload(1, 2, 2, [3, 1, 0, 3]), "zero-length run"),
        (build_payload(1, 2, 2, [2, 4]), "run counts"),
        (build_payload(2, 2, 2, [1]), "fewer than 2"),
        (build_payload(1, 2, 2, [0]), "no runs"),
        (build_payload(1, 2, 2, [1, 5]), "longer than"),
        (build_payload(1, 0, 2, [1, 0]), "zero pixels"),
        (build_payload(0, 2, 2, [4]), "run counts"),
    ],
)
def test_decode_rejects_bad_payloads(payload: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_masks(payload)


def _with_body(body: bytes, n: int = 1, h: int = 2, w: int = 2) -> bytes:
    head = struct.pack("<4sBBHIII", b"S3RL", 1, 0, 0, n, h, w)
    crc = zlib.crc32(body, zlib.crc32(head))
    return head + struct.pack("<IQ", crc, len(body)) + body


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"\x01\x84", "truncated varint"),
        (b"\x01\x84\x00", "non-canonical"),
        (b"\x01" + b"\xff" * 9 + b"\x01", "longer than 9 bytes"),
    ],
)
def test_decode_rejects_bad_varints(body: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_masks(_with_body(body))


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(ValueError, match="bytes"):
        decode_masks("S3RL")  # type: ignore[arg-type]


def test_every_truncation_is_rejected() -> None:
    payload = _valid_payload()
    for cut in range(len(payload)):
        with pytest.raises(ValueError):
            decode_masks(payload[:cut])


def test_every_single_bit_flip_is_rejected() -> None:
    payload = _valid_payload()
    for i in range(len(payload)):
        for bit in range(8):
            corrupt = bytearray(payload)
            corrupt[i] ^= 1 << bit
            with pytest.raises(ValueError):
                decode_masks(bytes(corrupt))


def test_accepts_bytearray_and_memoryview() -> None:
    masks = _some_masks(seed=6)
    payload = encode_masks(masks)
    for form in (bytearray(payload), memoryview(payload)):
        np.testing.assert_array_equal(decode_masks(form).to_dense(), masks)


# ----------------------------------------------------------------------------- standalone file


def test_rle_module_depends_only_on_numpy_stdlib_and_errors() -> None:
    """The export tool copies rle.py, with core/errors.py, into the Triton model: it must import
    nothing else (the package's errors inside napari_sam3, the copy of errors.py beside it)."""
    tree = ast.parse(Path(rle_module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in rle.py"
            imported.add(node.module)
    allowed = {"numpy", "errors", "napari_sam3.core.errors"}
    outside = {
        m for m in imported if m not in allowed and m.split(".")[0] not in sys.stdlib_module_names
    }
    assert not outside, outside


def test_rle_file_works_when_loaded_beside_errors_py(tmp_path, monkeypatch) -> None:
    """As in a Triton model's folder: rle.py and errors.py, no napari_sam3 package."""
    for module in (rle_module, errors):
        shutil.copyfile(module.__file__, tmp_path / Path(module.__file__).name)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "errors" not in sys.modules
    try:
        spec = importlib.util.spec_from_file_location("copied_rle", tmp_path / "rle.py")
        assert spec is not None and spec.loader is not None
        copied = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(copied)
        masks = _some_masks(seed=8)
        payload = copied.encode_masks(masks)
        assert payload == encode_masks(masks)
        np.testing.assert_array_equal(copied.decode_masks(payload).to_dense(), masks)
        with pytest.raises(sys.modules["errors"].BadData, match="RLE payload truncated"):
            copied.decode_masks(payload[:20])
    finally:
        sys.modules.pop("errors", None)


# ----------------------------------------------------------------------------- the vectorised encoder


def reference_payload(masks: np.ndarray) -> bytes:
    """The payload of a batch built pixel by pixel and byte by byte from docs/rle.md."""
    n, h, w = masks.shape
    per_mask = [reference_runs(m) for m in masks]
    values = [len(runs) for runs in per_mask] + [r for runs in per_mask for r in runs]
    return build_payload(n, h, w, values)


@pytest.mark.parametrize("chunk", [None, 7])
@pytest.mark.parametrize("density", [0.5, 0.1, 0.97])
def test_encoder_is_byte_identical_to_the_reference_on_noisy_masks(
    density: float, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Noise-like masks (the worst case for RLE: random weights, fragmented real imagery), with
    long runs mixed in so that every varint width up to 3 bytes occurs."""
    if chunk is not None:  # many chunks, and a chunk boundary inside the batch
        monkeypatch.setattr(rle_module, "_LEB128_CHUNK", chunk)
    rng = np.random.default_rng(int(density * 100))
    masks = rng.random((5, 61, 347)) < density
    masks[1, 3:50] = False  # a background run of 16,000+ pixels: a 3-byte varint
    masks[2, :40] = True  # a long foreground run
    masks[3] = False  # one run of H*W
    payload = encode_masks(masks)
    assert payload == reference_payload(masks)
    assert RleMasks.from_dense(masks).to_bytes() == payload
    np.testing.assert_array_equal(decode_masks(payload).to_dense(), masks)


def test_varints_of_every_width_match_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    edges = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**31, 2**32 - 1, 2**32]
    edges += [2**35 + 5, 2**49, 2**56 - 1, 2**56, 2**62, 2**63 - 1]
    rng = np.random.default_rng(3)
    values = np.concatenate([np.array(edges, np.int64), rng.integers(0, 2**40, 200)])
    expected = b"".join(leb128(int(v)) for v in values)
    for chunk in (1 << 20, 5):
        monkeypatch.setattr(rle_module, "_LEB128_CHUNK", chunk)
        assert rle_module._leb128_encode(values).tobytes() == expected
        small = values[values < 2**32]  # the uint32 path
        assert rle_module._leb128_encode(small).tobytes() == b"".join(leb128(int(v)) for v in small)
    assert rle_module._leb128_encode(np.zeros(0, np.int64)).size == 0
    assert rle_module._leb128_decode(rle_module._leb128_encode(values)).tolist() == values.tolist()


def test_a_batch_from_crops_equals_the_dense_one_and_keeps_exact_intervals() -> None:
    """Windows of noisy, full-width, edge-touching and empty masks; the intervals kept from the
    windows are those the runs give (areas, boxes and dedup read them)."""
    rng = np.random.default_rng(5)
    h, w = 23, 31
    dense = np.zeros((5, h, w), bool)
    crops = [
        (2, 3, rng.random((9, 11)) < 0.5),
        (0, 0, rng.random((h, w)) < 0.6),  # full width: runs wrap onto the next row
        None,
        (h - 4, w - 5, np.ones((4, 5), bool)),  # the last pixel is foreground
        (7, 0, np.zeros((3, w), bool)),  # a window with nothing in it
    ]
    for i, crop in enumerate(crops):
        if crop is not None:
            r, c, px = crop
            dense[i, r : r + px.shape[0], c : c + px.shape[1]] = px
    batch = RleMasks.from_crops(crops, (h, w))
    assert batch.to_bytes() == encode_masks(dense)
    again = decode_masks(batch.to_bytes())  # intervals computed from the runs
    for kept, computed in zip(batch.intervals(), again.intervals(), strict=True):
        np.testing.assert_array_equal(kept, computed)
    np.testing.assert_array_equal(batch.areas, dense.sum(axis=(1, 2)))
    np.testing.assert_array_equal(batch.bboxes, [reference_bbox(m) for m in dense])
    with pytest.raises(ValueError, match="does not fit"):
        RleMasks.from_crops([(20, 0, np.ones((4, 2), bool))], (h, w))


def test_concat_and_take_carry_what_is_known_and_match_a_fresh_batch() -> None:
    rng = np.random.default_rng(9)
    dense = rng.random((7, 12, 10)) < 0.3
    dense[2] = False
    crops = [(0, 0, m) for m in dense]
    parts = [RleMasks.from_crops(crops[:3], (12, 10)), RleMasks.from_crops(crops[3:], (12, 10))]
    joined = RleMasks.concat(parts, (12, 10))
    fresh = decode_masks(encode_masks(dense))  # everything computed from its runs
    assert joined.to_bytes() == fresh.to_bytes()
    for got, want in [(joined, fresh), (joined.take(np.arange(2, 6)), fresh.take([2, 3, 4, 5]))]:
        np.testing.assert_array_equal(got.areas, want.areas)
        np.testing.assert_array_equal(got.bboxes, want.bboxes)
        for a, b in zip(got.intervals(), want.intervals(), strict=True):
            np.testing.assert_array_equal(a, b)
    assert joined.take(np.arange(2, 6))._spans is not None  # carried, not recomputed
    scattered = joined.take([5, 0, 5])
    np.testing.assert_array_equal(scattered.bboxes, fresh.bboxes[[5, 0, 5]])
    np.testing.assert_array_equal(scattered.to_dense(), dense[[5, 0, 5]])
    with pytest.raises(ValueError, match="cannot join"):
        RleMasks.concat([parts[0], RleMasks.from_dense(dense[:, :5])], (12, 10))


def test_a_batch_from_intervals_makes_runs_only_when_asked_and_they_are_canonical() -> None:
    """Masks thresholded in-process hold their intervals; the runs, whole or per mask, are made
    on demand and equal the encoder's, whatever is taken or joined first."""
    rng = np.random.default_rng(11)
    h, w = 17, 13
    dense = rng.random((6, h, w)) < 0.45
    dense[1] = False  # empty
    dense[2, -1, -1] = True  # the last pixel is foreground: no trailing background run
    dense[3] = True  # full
    dense[4, :, :] = False
    dense[4, 0, 0] = True  # the first pixel only: a zero-length first background run
    eager = decode_masks(encode_masks(dense))

    def lazy() -> RleMasks:
        return RleMasks.from_crops([(0, 0, m) for m in dense], (h, w))

    batch = lazy()
    held = batch.nbytes
    np.testing.assert_array_equal(batch.counts, eager.counts)  # known without the runs
    assert repr(batch) == repr(eager)
    for i in range(len(dense)):  # per mask, from that mask's intervals alone
        one, want = batch.mask(i), eager.mask(i)
        assert (one.area, one.bbox) == (want.area, want.bbox)  # no runs needed
        assert one.crop()[:2] == want.crop()[:2]
        np.testing.assert_array_equal(one.crop()[2], want.crop()[2])
        np.testing.assert_array_equal(one.runs, want.runs)
        assert one == want and pickle.loads(pickle.dumps(one)) == want
    assert [m.runs.tolist() for m in batch.as_list()] == [m.runs.tolist() for m in eager.as_list()]
    assert batch.nbytes == held  # still no runs for the whole batch
    for idx in ([1, 2, 3], [5, 0, 5, -2], [], [4]):
        taken = lazy().take(idx)
        want = eager.take(idx)
        np.testing.assert_array_equal(taken.counts, want.counts)
        np.testing.assert_array_equal(taken.runs, want.runs)
        np.testing.assert_array_equal(taken.areas, want.areas)
        np.testing.assert_array_equal(taken.bboxes, want.bboxes)
        np.testing.assert_array_equal(taken.to_dense(), dense[idx].reshape(-1, h, w))
    joined = RleMasks.concat([lazy().take([0, 1]), eager.take([2, 3]), lazy().take([4, 5])], (h, w))
    assert joined.to_bytes() == encode_masks(dense)
    for a, b in zip(joined.intervals(), eager.intervals(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(batch.runs, eager.runs)
    assert batch.nbytes == held + eager.runs.nbytes  # made once, and kept
    assert batch.to_bytes() == encode_masks(dense)
    np.testing.assert_array_equal(batch.to_dense(), dense)

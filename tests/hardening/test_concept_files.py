"""Concept files come from elsewhere: nothing in one reaches the model but the two checked tensors.

Each case was found on the code before this module existed: a file's extra arrays were merged into
the model inputs (a crafted concept replaced `score_thr`), a small zip bomb unpacked to GiBs, a
header claiming 2^40 floats ended in MemoryError, empty files / a list as metadata / missing keys
ended in EOFError, AttributeError or KeyError (the CLI printed tracebacks, exit 1), an all-NaN
concept gave 0 rows with only a RuntimeWarning.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

from napari_sam3.core import contract
from napari_sam3.prompts.concept import Concept

TOKENS, PADDING = contract.CONCEPT_TOKENS_NAME, contract.CONCEPT_PADDING_MASK


@pytest.fixture(scope="module")
def concept(local_client, s2_crop) -> Concept:
    return local_client.encode_exemplars(s2_crop, [[40, 30, 140, 120]], name="roofs")


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _rewrite(data: bytes, drop=(), add=None, meta=None) -> bytes:
    """The concept file `data` with entries dropped, added (name -> raw bytes) or meta replaced."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as src,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        for info in src.infolist():
            name = info.filename[: -len(".npy")]
            if name in drop:
                continue
            if name == "meta" and meta is not None:
                raw = json.dumps(meta).encode() if not isinstance(meta, bytes) else meta
                dst.writestr(info.filename, _npy(np.frombuffer(raw, np.uint8)))
            else:
                dst.writestr(info.filename, src.read(info))
        for name, raw in (add or {}).items():
            dst.writestr(f"{name}.npy", raw)
    return out.getvalue()


def _meta(data: bytes) -> dict:
    with np.load(io.BytesIO(data)) as npz:
        return json.loads(npz["meta"].tobytes())


def test_extra_arrays_never_become_model_inputs(local_client, concept, s2_crop, tmp_path):
    data = concept.to_bytes()
    # The attack that worked: a tensor.score_thr listed in the meta replaced the caller's value.
    meta = _meta(data)
    meta["tensors"] = [*meta["tensors"], contract.SCORE_THR]
    crafted = _rewrite(
        data,
        add={f"tensor.{contract.SCORE_THR}": _npy(np.array([0.0], np.float32))},
        meta=meta,
    )
    with pytest.raises(ValueError, match="meta lists tensors"):
        Concept.from_bytes(crafted)
    unlisted = _rewrite(data, add={"tensor.images_u8": _npy(np.zeros((1, 3, 8, 8), np.uint8))})
    with pytest.raises(ValueError, match="unknown entries.*images_u8"):
        Concept.from_bytes(unlisted)
    # A Concept object holding more than a concept still sends only its two tensors.
    loaded = Concept.from_bytes(data)
    loaded.tensors_[contract.SCORE_THR] = np.array([0.0], np.float32)
    loaded.tensors_[contract.TOKEN_IDS] = np.zeros((1, 32), np.int64)
    assert set(loaded.inputs(local_client.manifest)) == {TOKENS, PADDING}
    everything = local_client.segment(s2_crop, "building", concept=concept, score_thr=0.0,
                                      dedup=None)  # fmt: skip
    assert len(everything) > 2
    cut = float(np.sort(everything["score"].values)[len(everything) // 2])
    honest = local_client.segment(s2_crop, "building", concept=concept, score_thr=cut, dedup=None)
    tampered = local_client.segment(s2_crop, "building", concept=loaded, score_thr=cut, dedup=None)
    assert 0 < len(honest) < len(everything) and (honest["score"] >= cut).all()
    np.testing.assert_array_equal(honest["score"].values, tampered["score"].values)


def test_zip_bomb_and_huge_headers_are_refused_before_allocation(concept, tmp_path):
    data = concept.to_bytes()
    # 256 MiB of zeros deflate to ~250 kB: refused from the zip entry's size, never unpacked.
    bomb = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as src,
        zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        for info in src.infolist():
            if info.filename == f"tensor.{TOKENS}.npy":
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    header, {"descr": "<f4", "fortran_order": False, "shape": (1, 2**26, 1)}
                )
                with dst.open(info.filename, "w") as entry:
                    entry.write(header.getvalue())
                    for _ in range(256):
                        entry.write(bytes(2**20))
            else:
                dst.writestr(info.filename, src.read(info))
    bomb_bytes = bomb.getvalue()
    assert len(bomb_bytes) < 2 * 2**20
    # A header claiming 2^40 floats over a few bytes of data.
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (1, 2**20, 2**20)}
    )
    liar = _rewrite(data, drop={f"tensor.{TOKENS}"},
                    add={f"tensor.{TOKENS}": header.getvalue() + bytes(64)})  # fmt: skip
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=f"entry {TOKENS} unpacks to 268,435,"):
            Concept.from_bytes(bomb_bytes, "bomb.npz")
        with pytest.raises(ValueError, match="claims 4,398,046,511,104 bytes"):
            Concept.from_bytes(liar, "liar.npz")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"refusing took {peak / 2**20:.0f} MiB"


def test_malformed_files_are_value_errors_naming_the_file(concept, local_client, tmp_path):
    data = concept.to_bytes()
    meta = _meta(data)
    pickled = io.BytesIO()
    np.lib.format.write_array(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    nan_tokens = np.full((1, *concept.tensors()[TOKENS].shape[1:]), np.nan, np.float32)
    cases = {
        "empty": (b"", "the file is empty"),
        "not a zip": (b"PK\x03\x04 garbage", "not an .npz archive"),
        "list meta": (_rewrite(data, meta=[1, 2]), "meta is a JSON list"),
        "not json": (_rewrite(data, meta=b"\xff{"), "meta is not JSON"),
        "no meta": (_rewrite(data, drop={"meta"}), "no 'meta' entry"),
        "no model": (_rewrite(data, meta={**meta, "model_id": 7}), "model_id"),
        "no tokens": (_rewrite(data, drop={f"tensor.{TOKENS}"}), "lacks it"),
        "wrong format": (_rewrite(data, meta={**meta, "format": "x"}), "format tag"),
        "pickle": (
            _rewrite(data, drop={"labels"}, add={"labels": pickled.getvalue()}),
            "Python objects",
        ),
        "wrong dtype": (
            _rewrite(
                data,
                drop={f"tensor.{TOKENS}"},
                add={f"tensor.{TOKENS}": _npy(np.zeros((1, 9, 32), np.float64))},
            ),
            "dtype float64, expected float32",
        ),  # fmt: skip
        "all NaN": (
            _rewrite(data, drop={f"tensor.{TOKENS}"}, add={f"tensor.{TOKENS}": _npy(nan_tokens)}),
            "every value is NaN",
        ),
        "all padding": (
            _rewrite(
                data,
                drop={f"tensor.{PADDING}"},
                add={f"tensor.{PADDING}": _npy(np.ones((1, nan_tokens.shape[1]), bool))},
            ),
            "every concept token is marked as padding",
        ),  # fmt: skip
        "truncated": (data[: len(data) // 2], "not an .npz archive"),
    }
    for label, (raw, message) in cases.items():
        path = tmp_path / f"{label.replace(' ', '_')}.npz"
        path.write_bytes(raw)
        with pytest.raises(ValueError, match=message) as info:
            Concept.load(path)
        assert str(path) in str(info.value), label
    # The client's own model decides the shapes: a concept of another size is refused by name.
    other = Concept({TOKENS: np.zeros((1, 5, 16), np.float32), PADDING: np.zeros((1, 5), bool)},
                    local_client.model_id, "small")  # fmt: skip
    path = other.save(tmp_path / "small.npz")
    Concept.load(path)  # well-formed in itself
    with pytest.raises(ValueError, match=r"shape \[1, 5, 16\], but this model's concepts"):
        Concept.load(path, local_client.manifest)
    with pytest.raises(ValueError, match="this model's concepts"):
        local_client.segment(np.zeros((64, 64, 3), np.uint8), "x", concept=other)


def test_the_cli_says_one_line_and_exits_2(concept, tiny_repository, s2_rgb_paths, tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(_rewrite(concept.to_bytes(), meta=[1]))
    result = subprocess.run(
        [sys.executable, "-m", "napari_sam3.cli", "segment", str(s2_rgb_paths[0]),
         "--models", str(tiny_repository), "--precision", "fp32", "--concept", str(bad), "--out",
         str(tmp_path / "out.gpkg"), "--quiet"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "bad.npz" in x]
    assert "meta is a JSON list" in line
    assert not (tmp_path / "out.gpkg").exists()

"""Small files from elsewhere are refused before they are read: missing, not a file, too large."""

from __future__ import annotations

import pytest

from napari_sam3.core.files import MAX_PEM_BYTES, read_pem, read_small_file
from napari_sam3.serving.repository_check import RepositoryError


def test_a_small_file_is_read_whole(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"x" * 10)
    assert read_small_file(path, 10, "thing") == b"x" * 10


def test_refusals_name_what_the_file_should_be(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"concept file: no file at .*nope"):
        read_small_file(tmp_path / "nope", 10, "concept file")
    with pytest.raises(ValueError, match="concept file: .* is not a file"):
        read_small_file(tmp_path, 10, "concept file")
    big = tmp_path / "big"
    with big.open("wb") as f:  # sparse: the size is refused, nothing is read
        f.truncate(11)
    with pytest.raises(RepositoryError, match="is 11 bytes, over the 10 any config needs"):
        read_small_file(big, 10, "config", RepositoryError)


def test_a_pem_needs_its_marker_and_a_pem_size(tmp_path):
    good = tmp_path / "ca.pem"
    good.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert read_pem(good, "root_certificates").startswith(b"-----BEGIN")
    with pytest.raises(ValueError, match="not a PEM file .no PRIVATE KEY line"):
        read_pem(good, "key", "PRIVATE KEY-----")
    huge = tmp_path / "huge.pem"
    with huge.open("wb") as f:
        f.truncate(MAX_PEM_BYTES + 1)
    with pytest.raises(ValueError, match="TLS key: .* over the"):
        read_pem(huge, "key")

"""Reading a small file that came from elsewhere: refused before a byte is read when it is not a
regular file or is larger than anything of its kind can be (a concept, a PEM, a model config)."""

from __future__ import annotations

import os
from pathlib import Path

from napari_sam3.core.errors import BadData, MissingFile


def read_small_file(
    path: str | os.PathLike, limit: int, what: str, error: type[Exception] = ValueError
) -> bytes:
    """The bytes of `path`, at most `limit` of them.

    A missing path is `FileNotFoundError`; a folder, a device or a file over `limit` is `error`,
    each message naming `what` the file should have been.
    """
    path = Path(path)
    if not path.exists():
        raise MissingFile(f"{what}: no file at {path}")
    if not path.is_file():
        raise error(f"{what}: {path} is not a file")
    size = path.stat().st_size
    if size > limit:
        raise error(f"{what}: {path} is {size:,} bytes, over the {limit:,} any {what} needs")
    return path.read_bytes()


MAX_PEM_BYTES = 1 << 20  # certificates and keys are a few kB; a chain of many is still far below


def read_pem(path: str | os.PathLike, what: str, marker: str = "-----BEGIN ") -> bytes:
    """A TLS certificate or key file: small, and holding `marker`."""
    data = read_small_file(path, MAX_PEM_BYTES, f"TLS {what}")
    if marker.encode("ascii") not in data:
        raise BadData(f"TLS {what}: {path} is not a PEM file (no {marker.strip('- ')} line)")
    return data

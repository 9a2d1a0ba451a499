"""Files: reading a small file that came from elsewhere (refused before a byte is read when it
is not a regular file or is larger than anything of its kind can be: a concept, a PEM, a model
config), and writing atomically (a temporary name in the same folder, then a rename)."""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from napari_sam3.core.errors import InvalidInput, MissingFile, OutputExists


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
        raise InvalidInput(f"TLS {what}: {path} is not a PEM file (no {marker.strip('- ')} line)")
    return data


def check_target(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise OutputExists(f"{path} exists; choose another name or pass overwrite=True")
    if not path.parent.exists():
        raise MissingFile(f"folder {path.parent} does not exist")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yields a temporary path beside `path`; moved onto `path` only if the block succeeds."""
    path = Path(path)
    check_target(path, overwrite)
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=path.suffix, dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # writers such as GDAL want to create the file themselves
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if not overwrite and path.exists():
            raise OutputExists(f"{path} appeared while writing; not replacing it")
        # The data reaches the disk before the new name does, and the name before we return:
        # a crash leaves the old file or the complete new one, never an empty one.
        _fsync(tmp_path)
        os.replace(tmp_path, path)
        _fsync(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}."


def remove_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove what `atomic_path` left beside `path` when its process was ended mid-write
    (a kill runs no cleanup); the removed paths. Only for a folder this process holds."""
    path = Path(path)
    removed = []
    for leftover in path.parent.glob(f"{glob.escape(_temporary_prefix(path))}*{path.suffix}"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
            removed.append(leftover)
    return removed


def _fsync(path: Path) -> None:
    """Flush a written file (or a folder's entries) to the disk."""
    if path.is_dir() and os.name == "nt":
        return  # Windows cannot open a folder to flush it (NTFS journals the rename)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, overwrite: bool = False) -> Path:
    with atomic_path(path, overwrite) as tmp:
        tmp.write_bytes(data)
    return Path(path)

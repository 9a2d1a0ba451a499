"""Files: reading a small file that came from elsewhere (refused before a byte is read when it
is not a regular file or is larger than anything of its kind can be: a concept, a PEM, a model
config), and writing atomically (a temporary name in the same folder, then a rename)."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from napari_sam3.core.errors import FileSystemError, InvalidInput, MissingFile, OutputExists


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

    def made() -> list[Path]:
        """The temporary file and what the writer made beside it (a staging copy, a journal)."""
        return [tmp_path, *tmp_path.parent.glob(f"{glob.escape(tmp_path.name)}?*")]

    try:
        with disk_errors(path, made):
            yield tmp_path
            if not overwrite and path.exists():
                raise OutputExists(f"{path} appeared while writing; not replacing it")
            # The data reaches the disk before the new name does, and the name before we
            # return: a crash leaves the old file or the complete new one, never an empty one.
            _fsync(tmp_path)
            os.replace(tmp_path, path)
            _fsync(path.parent)
    finally:
        for leftover in made():
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


# What a file system answers when it cannot take more: no space, a quota, a file-size limit.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# How much more than the failed write had reached a folder must take to be called healthy.
_PROBE_MARGIN = 1 << 16


@contextlib.contextmanager
def disk_errors(path: Path, written: Callable[[], Iterable[Path]]) -> Iterator[None]:
    """A write of `path` that fails because the file system cannot take it raises
    `FileSystemError` naming `path` and what to do; any other failure passes unchanged.

    Writers say "disk full" in their own words (GDAL: "Cannot write feature", SQLite: "no such
    table", TIFF: "Write failed"), so besides an errno found in the error or its causes the
    folder is asked directly: can it hold a file a little larger than the largest of `written`
    (the files the write had made)? Only a failed write pays for the question.
    """
    try:
        yield
    except Exception as error:
        code = _disk_errno(error)
        if code is None:
            reached = max((_size(p) for p in written()), default=0)
            code = _can_hold(path.parent, reached + _PROBE_MARGIN)
        if code is None:
            raise
        raise disk_full(path, code) from error


def disk_full(path: Path, code: int) -> FileSystemError:
    """The error for `path` not written because the file system answered `code`."""
    # the message alone: an errno or filename set on an OSError replaces it in str()
    return FileSystemError(
        f"cannot write {path}: {os.strerror(code)} (the disk or quota is full, or a file-size "
        f"limit was reached); nothing was written there and the inputs are untouched: free "
        f"space in {path.parent} (or write the output elsewhere) and run again"
    )


def _disk_errno(error: BaseException | None) -> int | None:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_FULL:
            return error.errno
        error = error.__cause__ or error.__context__
    return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _can_hold(folder: Path, size: int) -> int | None:
    """None if `folder` takes a file of `size` bytes (reserved, never written); else the errno."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".napari-sam3-space.", dir=folder)
    except OSError as error:
        return error.errno if error.errno in DISK_FULL else None
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except (AttributeError, OSError) as error:  # AttributeError: Windows, macOS
            if getattr(error, "errno", None) not in (None, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            for start in range(0, size, 1 << 20):  # no fallocate here: write it
                os.write(fd, bytes(min(1 << 20, size - start)))
    except OSError as error:
        return error.errno if error.errno in DISK_FULL else None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


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


def file_fingerprint(path: str | os.PathLike) -> dict[str, int]:
    """What says a local file is the one seen before: its size and modification time (ns)."""
    stat = Path(path).stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def atomic_write_bytes(path: Path, data: bytes, overwrite: bool = False) -> Path:
    with atomic_path(path, overwrite) as tmp:
        tmp.write_bytes(data)
    return Path(path)

"""napari-sam3's exceptions and the exit codes its commands return for them, in one place.

Every error the package raises on purpose is a `Sam3Error`; the commands (`napari-sam3`,
`sam3-serve`, `sam3-export`) return its `exit_code`. Each also derives from the built-in type a
caller would expect (`ValueError` for bad input, `RuntimeError` for a failed run, ...), so
`except ValueError` keeps working. tests/core/test_raise_scan.py keeps bare built-ins out.

This file is copied beside each Triton Python model, so it imports nothing.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # it ran and failed: a scene, a server that became unhealthy, a lost connection
EXIT_REFUSED = 2  # refused before anything ran: arguments, files, setup
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it): nothing partial written


class Sam3Error(Exception):
    """The base of napari-sam3's own errors."""

    exit_code = EXIT_FAILED


class RefusedError(Sam3Error):
    """Bad input or setup, found before anything ran."""

    exit_code = EXIT_REFUSED


# -- refused: what the caller gave, or when, is wrong; nothing was done ------------------------


class InvalidInput(RefusedError, ValueError):
    """A value a caller passed, or a tensor a request carried, that breaks a rule (the rules of
    `core/validate.py` give the same message in the client, the embedded engine and the server)."""


class InvalidType(RefusedError, TypeError):
    """An argument of the wrong type."""


class MissingFile(RefusedError, FileNotFoundError):
    """A file or folder that should exist does not."""


class OutputExists(RefusedError, FileExistsError):
    """An output that exists and may not be replaced (no overwrite asked for)."""


class MissingDependency(RefusedError, ImportError):
    """An optional package a feature needs is not installed (the message names it)."""


class UnknownKey(RefusedError, KeyError):
    """A name looked up that is not there: a graph, a tensor, a row."""

    def __str__(self) -> str:  # the message as written, not quoted as KeyError quotes it
        return Exception.__str__(self)


class OutOfRange(RefusedError, IndexError):
    """An index past the end of a sequence."""


class InvalidState(RefusedError, RuntimeError):
    """A call at the wrong moment: the engine is closed, the image not encoded yet, another run
    still going."""


# -- failed: it ran, or read something, and could not go on -----------------------------------


class BadData(Sam3Error, ValueError):
    """Data read from a file, a payload or a server's answer that is damaged or malformed."""


class RunFailed(Sam3Error, RuntimeError):
    """A run that started and failed (a model call, a step of a pipeline)."""


class ConnectionFailed(Sam3Error, ConnectionError):
    """A server that cannot be reached, or a connection that closed or was lost."""


class TimedOut(Sam3Error, TimeoutError):
    """Something that did not finish, or get ready, within its time."""


class FileSystemError(Sam3Error, OSError):
    """Reading or writing a file failed: a full disk, a folder that cannot be written."""

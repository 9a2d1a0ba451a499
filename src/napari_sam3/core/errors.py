"""napari-sam3's exceptions and the exit codes its commands return for them, in one place.

Every error the package raises on purpose is a `Sam3Error`; the commands (`napari-sam3`,
`sam3-serve`, `sam3-export`) return its `exit_code`. Most also derive from the built-in type a
caller would expect (`ValueError` for bad input, `RuntimeError` for a failed run), so
`except ValueError` keeps working.
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


class InvalidInput(RefusedError, ValueError):
    """A value a caller passed, or a tensor a request carried, that breaks a rule of
    `core/validate.py`: the same message in the client, the embedded engine and the server."""

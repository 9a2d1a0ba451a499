"""One way to connect: :class:`ConnectionSpec`, what every client of this package is made from.

The command line (``napari-sam3``), the panel's connection section (through its saved settings,
``settings.py``), batch runs of folders (``scene/batch.py``) and every Dask worker make their
``Sam3Client`` with ``spec.connect()``, so an option given in one place (TLS files, timeouts, the
embedded runtime) reaches every client of a run. A spec is frozen, hashable and picklable: it
travels to worker processes, which keep one client per spec.

The runtime and precision names (from ``runtime/onnx_runner.py``) and the option names of the
command line live here; the timeouts and their defaults live below the client and the engines
(``runtime/engines/settings.py``) and are re-exported here. The check of a number of seconds is
``validate.seconds``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput
from napari_sam3.runtime.engines.settings import (
    DEADLINE_FACTOR,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    Timeouts,
)
from napari_sam3.runtime.onnx_runner import AUTO, PRECISIONS, RUNTIMES, check_choice

__all__ = [
    "DEADLINE_FACTOR",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_LIVENESS_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "OPTIONS",
    "PRECISION_CHOICES",
    "RUNTIME_CHOICES",
    "ConnectionSpec",
    "Timeouts",
    "check_embedded",
    "check_times",
]

# what the embedded engine accepts: "auto" or a name of onnx_runner's
RUNTIME_CHOICES = (AUTO, *RUNTIMES)
PRECISION_CHOICES = (AUTO, *PRECISIONS)

# ConnectionSpec field -> its command-line option (messages name both)
OPTIONS = {
    "servers": "--server",
    "repository": "--models",
    "tls": "--tls",
    "root_certificates": "--tls-root-cert",
    "private_key": "--tls-client-key",
    "certificate_chain": "--tls-client-cert",
    "connect_timeout": "--connect-timeout",
    "request_timeout": "--request-timeout",
    "deadline": "--deadline",
    "runtime": "--runtime",
    "precision": "--precision",
    "threads": "--threads",
    "cache_bytes": "--cache-mib",
}
_TRITON_ONLY = (
    "tls",
    "root_certificates",
    "private_key",
    "certificate_chain",
    "connect_timeout",
    "request_timeout",
    "deadline",
)
_EMBEDDED_ONLY = ("runtime", "precision", "threads", "cache_bytes")
_MAX_CACHE_BYTES = 2**62


def check_times(
    connect_timeout: object, request_timeout: object, deadline: object = None
) -> tuple[float, float, float | None]:
    """The Triton timeouts as floats; each a positive number of seconds (deadline: or None)."""
    return (
        validate.seconds(_named("connect_timeout"), connect_timeout),
        validate.seconds(_named("request_timeout"), request_timeout),
        None if deadline is None else validate.seconds(_named("deadline"), deadline),
    )


def check_embedded(
    runtime: object, precision: object, threads: object, cache_bytes: object
) -> None:
    """The embedded engine's options: known runtime and precision names, a thread count, a
    cache bound in bytes (or None)."""
    try:
        check_choice(runtime, precision)
    except ValueError as error:
        raise InvalidInput(f"{error} ({OPTIONS['runtime']}, {OPTIONS['precision']})") from None
    validate.integer(_named("threads"), threads, 0, 1024)
    if cache_bytes is not None:
        validate.positive_int(_named("cache_bytes"), cache_bytes, _MAX_CACHE_BYTES)


def _named(field: str) -> str:
    return f"{OPTIONS[field]} ({field})"


def _absolute(path: str | os.PathLike) -> str:
    return str(Path(path).expanduser().absolute())


@dataclass(frozen=True)
class ConnectionSpec:
    """Where the model runs and how to reach it: a model repository run in-process (the embedded
    engine), or one or more Triton servers (several make a pool).

    Triton only: ``tls`` with ``root_certificates`` (the CA to trust; None: the system's) and,
    for mutual TLS, ``private_key`` with ``certificate_chain``; ``connect_timeout`` (seconds to
    wait for a ready server), ``request_timeout`` (the most one request try may take) and
    ``deadline`` (all tries of one call together; None: ``DEADLINE_FACTOR`` x
    ``request_timeout``). Embedded only: ``runtime`` and ``precision`` (``RUNTIME_CHOICES``,
    ``PRECISION_CHOICES``), ``threads`` per graph (0: the runtime's default) and ``cache_bytes``,
    the bound of the in-process feature cache (None: the repository's). Giving an option of the
    other kind is an error, never silently ignored. Paths are stored absolute.
    """

    servers: tuple[str, ...] = ()
    repository: str | None = None
    tls: bool = False
    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    deadline: float | None = None
    runtime: str = AUTO
    precision: str = AUTO
    threads: int = 0
    cache_bytes: int | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        servers = self.servers
        if isinstance(servers, str):
            servers = servers.split(",")
        if not isinstance(servers, list | tuple) or not all(isinstance(s, str) for s in servers):
            raise InvalidInput(
                f"servers are Triton addresses such as 'host:8001', got {self.servers!r}"
            )
        servers = tuple(dict.fromkeys(s.strip() for s in servers if s.strip()))
        set_(self, "servers", servers)
        if self.repository is not None and not isinstance(self.repository, str | os.PathLike):
            raise InvalidInput(f"repository must be a folder name, got {self.repository!r}")
        if self.repository is not None and not str(self.repository).strip():
            set_(self, "repository", None)
        if (self.repository is None) == (not servers):
            raise InvalidInput(
                "a connection needs a model repository folder (--models, run in-process) or "
                "Triton server addresses (--server host:8001), not both and not neither"
            )
        if self.repository is not None:
            set_(self, "repository", _absolute(self.repository))
        if not isinstance(self.tls, bool):
            raise InvalidInput(f"tls must be True or False, got {self.tls!r}")
        for name in ("root_certificates", "private_key", "certificate_chain"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str | os.PathLike):
                raise InvalidInput(f"{_named(name)} must be a PEM file name, got {value!r}")
            set_(self, name, _absolute(value) if value is not None and str(value) else None)
        if not self.tls and any(
            getattr(self, n) for n in ("root_certificates", "private_key", "certificate_chain")
        ):
            raise InvalidInput(
                "certificate files are for TLS: --tls-root-cert, --tls-client-cert and "
                "--tls-client-key need --tls (tls=True)"
            )
        if (self.private_key is None) != (self.certificate_chain is None):
            raise InvalidInput(
                "mutual TLS needs the client's certificate and its key together: give "
                "--tls-client-cert (certificate_chain) and --tls-client-key (private_key), "
                "or neither"
            )
        times = check_times(self.connect_timeout, self.request_timeout, self.deadline)
        for name, value in zip(
            ("connect_timeout", "request_timeout", "deadline"), times, strict=True
        ):
            set_(self, name, value)
        check_embedded(self.runtime, self.precision, self.threads, self.cache_bytes)
        if servers:
            given = [n for n in _EMBEDDED_ONLY if getattr(self, n) != _DEFAULTS[n]]
            if given:
                raise InvalidInput(
                    f"{', '.join(map(_named, given))}: for the embedded engine (--models) only; "
                    "a Triton server chooses its own"
                )
        else:
            given = [n for n in _TRITON_ONLY if getattr(self, n) != _DEFAULTS[n]]
            if given:
                raise InvalidInput(
                    f"{', '.join(map(_named, given))}: for Triton servers (--server) only; the "
                    "embedded engine runs in this process"
                )

    # -- what it says ------------------------------------------------------------------------
    @property
    def embedded(self) -> bool:
        """True for a model repository run in-process, False for Triton servers."""
        return self.repository is not None

    @property
    def where(self) -> str:
        """The repository folder, or the server addresses (comma-separated)."""
        return self.repository if self.embedded else ",".join(self.servers)

    @property
    def total_deadline(self) -> float:
        """Seconds all tries of one call may take together (Triton)."""
        return (
            self.deadline if self.deadline is not None else DEADLINE_FACTOR * self.request_timeout
        )

    def changed(self) -> dict[str, Any]:
        """The fields that differ from their defaults (for messages and run journals)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != _DEFAULTS[f.name]
        }

    # -- the client --------------------------------------------------------------------------
    def connect(self) -> Any:
        """A new ``Sam3Client`` for this spec (the caller closes it)."""
        from napari_sam3.client.sam3 import Sam3Client

        if self.embedded:
            return Sam3Client.local(
                self.repository,
                self.threads,
                cache_bytes=self.cache_bytes,
                runtime=self.runtime,
                precision=self.precision,
            )
        return Sam3Client(
            list(self.servers),
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            deadline=self.deadline,
            tls=self.tls,
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


_DEFAULTS = {f.name: f.default for f in fields(ConnectionSpec)}

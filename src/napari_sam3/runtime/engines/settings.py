"""How long the Triton engines wait: the :class:`Timeouts` and their defaults.

Below both the engines and the client (``client/connection.py`` builds its ``ConnectionSpec`` on
them), so neither imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from napari_sam3.core import validate

__all__ = [
    "DEADLINE_FACTOR",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_LIVENESS_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "Timeouts",
]

DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds to wait for a ready Triton server
DEFAULT_REQUEST_TIMEOUT = 600.0  # one request try; a full-size CPU encoder pass takes ~40 s
DEFAULT_LIVENESS_TIMEOUT = 20.0  # a server silent this long while a request runs is given up on
DEADLINE_FACTOR = 1.5  # all tries of one call: this times the request timeout, unless given


@dataclass(frozen=True)
class Timeouts:
    """How long a Triton client waits, in seconds, and how often it tries again.

    ``connect``: for a ready server; ``request``: the most one request try may take;
    ``deadline``: all tries of one call together (None: ``DEADLINE_FACTOR`` x ``request``);
    ``liveness``: a server silent this long while a request runs is given up on.
    """

    connect: float = DEFAULT_CONNECT_TIMEOUT
    request: float = DEFAULT_REQUEST_TIMEOUT
    deadline: float | None = None
    liveness: float = DEFAULT_LIVENESS_TIMEOUT
    retries: int = 3

    def __post_init__(self) -> None:
        for name in ("connect", "request", "liveness"):
            object.__setattr__(self, name, validate.seconds(f"{name}_timeout", getattr(self, name)))
        if self.deadline is not None:
            object.__setattr__(self, "deadline", validate.seconds("deadline", self.deadline))
        object.__setattr__(self, "retries", validate.integer("retries", self.retries, 0, 100))

    @property
    def total(self) -> float:
        """All tries of one call together."""
        return self.deadline if self.deadline is not None else DEADLINE_FACTOR * self.request

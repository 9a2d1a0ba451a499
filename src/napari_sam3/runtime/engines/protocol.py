"""What every engine offers: the embedded `LocalEngine`, a Triton server's `TritonEngine`, and a
pool of servers' `PoolEngine`. The client, scenes and the panel use only this: any object that
offers it can be given to `Sam3Client(engine=...)` (`checked_engine` says what one lacks)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from napari_sam3.core.errors import InvalidType
from napari_sam3.runtime.engines.model_config import ModelConfig, OutputNames, Outputs, Tensors


@runtime_checkable
class Engine(Protocol):
    @property
    def address(self) -> str:
        """Where the models run: "host:port", "a:8001,b:8001" or "local:DIR"."""

    @property
    def local(self) -> bool:
        """Whether the models run in this process: their caches then take this process's
        memory (a scene plans them within its budget, `cache_bounds` bounds them)."""

    def config(self, model_name: str) -> ModelConfig:
        """A model's parsed config.pbtxt."""

    def infer(self, model_name: str, inputs: Tensors, output_names: OutputNames = None) -> Outputs:
        """One request; the outputs the model answered."""

    def statistics(self, model_name: str) -> dict:
        """Execution counts, in the shape of Triton's statistics."""

    def concurrency(self) -> int:
        """Requests worth having in flight at once (scenes read that many tiles ahead)."""

    def refresh(self) -> None:
        """Forget what was read from the models (their configs): a server may have restarted on
        another repository."""

    def runtime_summary(self, reasons: bool = False) -> str | None:
        """What runs the graphs, one line; None where the server decides it."""

    def runtime_choices(self) -> dict[str, Any] | None:
        """Per graph, what runs it and why (`onnx_runner.Choice`: runtime, precision, reason);
        None where the server decides it."""

    def loaded_graphs(self) -> list[str] | None:
        """The graphs in memory now (they load on first use); None where the server decides it."""

    def cache_bounds(
        self, features: int | None = None, heads: int | None = None
    ) -> tuple[int, int] | None:
        """Bound the feature cache and the heads cache of `sam3_cached` at these bytes from now
        on (None: unchanged); the bounds before, to restore them. None where the caches are a
        server's own (nothing changes)."""

    def close(self) -> None:
        """Release the connection or the runtimes; later calls fail."""


# the members that are values, not methods
PROPERTIES = ("address", "local")
MEMBERS = tuple(
    name for name in dir(Engine) if not name.startswith("_") and name not in ("register",)
)


class NotAnEngine(InvalidType):
    """An object given as an engine that lacks members of `Engine`."""


def checked_engine(engine: object) -> Engine:
    """`engine` where it offers every member of `Engine` (its methods callable); else an error
    naming what it lacks."""
    missing = [
        name
        for name in MEMBERS
        if not hasattr(engine, name)
        or (name not in PROPERTIES and not callable(getattr(engine, name)))
    ]
    if missing:
        raise NotAnEngine(
            f"{type(engine).__name__} is not an engine: it lacks {', '.join(missing)}. An engine "
            "offers every member of napari_sam3.runtime.engines.Engine (LocalEngine, "
            "TritonEngine and PoolEngine do); or pass an address, or use Sam3Client.local"
        )
    return engine

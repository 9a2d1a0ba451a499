"""What every engine offers: the embedded `LocalEngine`, a Triton server's `TritonEngine`, and a
pool of servers' `PoolEngine`. The client, scenes and the panel use only this."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from napari_sam3.runtime.engines.model_config import ModelConfig, OutputNames, Outputs, Tensors


@runtime_checkable
class Engine(Protocol):
    @property
    def address(self) -> str:
        """Where the models run: "host:port", "a:8001,b:8001" or "local:DIR"."""

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

    def loaded_graphs(self) -> list[str] | None:
        """The graphs in memory now (they load on first use); None where the server decides it."""

    def close(self) -> None:
        """Release the connection or the runtimes; later calls fail."""

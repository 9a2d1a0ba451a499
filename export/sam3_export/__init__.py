"""Export SAM3 to static-shape fp32 ONNX graphs and a Triton model repository.

`export_all(out_dir, size="tiny", seed=0, checkpoint=None) -> manifest` is the Python entry
point (the `sam3-export` command wraps it); it is imported lazily so that importing this
package does not pull torch.
"""

from typing import Any

__all__ = ["export_all"]


def __getattr__(name: str) -> Any:
    if name == "export_all":
        from .pipeline import export_all

        return export_all
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

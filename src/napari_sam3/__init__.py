"""napari-sam3: segment satellite and aerial imagery with SAM3 (ONNX, Triton or in-process)."""

__version__ = "0.1.0"

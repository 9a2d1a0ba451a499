"""napari-sam3: segment satellite and aerial imagery with SAM3 (ONNX, Triton or in-process).

The public API, in data-flow order: raster -> model input -> prompt -> client -> DataFrame -> GIS.
Heavy modules are imported on first use so that `import napari_sam3` stays cheap for napari.
"""

from __future__ import annotations

import importlib

from .triton_models.host import decline_telemetry

__version__ = "0.1.0"

# Before anything can import ONNX Runtime: no usage telemetry (README, "No network").
decline_telemetry()

_EXPORTS = {
    "read_raster": "raster",
    "raster_info": "raster",
    "Raster": "raster",
    "RasterInfo": "raster",
    "to_model_rgb": "stretch",
    "compute_stretch": "stretch",
    "scene_stretch": "stretch",
    "StretchStats": "stretch",
    "Letterbox": "letterbox",
    "tokenize": "tokenizer",
    "encode_masks": "masks.rle",
    "decode_masks": "masks.rle",
    "dedup_masks": "masks.dedup",
    "Sam3Client": "client",
    "Concept": "concept",
    "ModelChanged": "cache",
    "masks_to_labels": "gis",
    "to_geodataframe": "gis",
    "write_vector": "gis",
    "write_labels_geotiff": "gis",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'napari_sam3' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

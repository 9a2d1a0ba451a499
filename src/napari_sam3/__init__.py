"""napari-sam3: segment satellite and aerial imagery with SAM3 (ONNX, Triton or in-process).

The public API, in data-flow order: raster -> model input -> prompt -> client -> DataFrame -> GIS.
Heavy modules are imported on first use so that `import napari_sam3` stays cheap for napari.
"""

from __future__ import annotations

import importlib

from napari_sam3.runtime.host import decline_telemetry

__version__ = "0.1.0"

# Before anything can import ONNX Runtime: no usage telemetry (README, "No network").
decline_telemetry()

_EXPORTS = {
    "Sam3Error": "core.errors",
    "read_raster": "imagery.raster",
    "raster_info": "imagery.raster",
    "Raster": "imagery.raster",
    "RasterInfo": "imagery.raster",
    "to_model_rgb": "imagery.stretch",
    "compute_stretch": "imagery.stretch",
    "scene_stretch": "imagery.stretch",
    "StretchStats": "imagery.stretch",
    "Letterbox": "imagery.letterbox",
    "tokenize": "prompts.tokenizer",
    "encode_masks": "masks.rle",
    "decode_masks": "masks.rle",
    "dedup_masks": "masks.dedup",
    "Sam3Client": "client.sam3",
    "Concept": "prompts.concept",
    "Query": "prompts.query",
    "PostProcess": "prompts.query",
    "SceneSettings": "scene.settings",
    "segment_scene": "scene.run",
    "segment_to_file": "scene.driver",
    "ModelChanged": "client.cache",
    "masks_to_labels": "gis.vector",
    "to_geodataframe": "gis.vector",
    "write_vector": "gis.vector",
    "write_labels_geotiff": "gis.vector",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'napari_sam3' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

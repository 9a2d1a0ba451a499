"""`sam3_interactive`: encode an image once, then answer prompts against its cached features.

Kept for clients that address it directly; `Sam3Client` uses `sam3_cached`, which shares ONE
cache between grounding and interactive prompts. The interactive neck's features of recent images
are kept in the same `ByteLRU`, keyed by the client's image id (least recently used first out,
at most `cache_bytes`, each dropped `cache_ttl_s` seconds after its last use). A request carrying `images_u8` (re)encodes; a request carrying prompts decodes
against the cached features, so only the prompt travels per click. Unknown or expired ids are a
clear error telling the client to send the image again.
"""

from __future__ import annotations

import numpy as np

if __package__:  # inside napari_sam3 (a real ImportError surfaces as it is)
    from napari_sam3.core import contract
    from napari_sam3.runtime.cached import ByteLRU, decode_click, decode_grid
else:  # the copies beside the Triton model, where siblings are plain modules
    import contract
    from cached import ByteLRU, decode_click, decode_grid


def _image_id(inputs: dict) -> str:
    if contract.IMAGE_ID not in inputs:
        raise ValueError(f"{contract.IMAGE_ID} is required")
    value = np.asarray(inputs[contract.IMAGE_ID]).reshape(-1)
    if value.size != 1:
        raise ValueError(f"{contract.IMAGE_ID} must hold one id")
    key = value[0]
    key = key.decode() if isinstance(key, bytes) else str(key)
    if not key:
        raise ValueError(f"{contract.IMAGE_ID} is empty")
    return key


class Logic:
    def __init__(self, model_dir: str, parameters: dict) -> None:
        self.image_size = int(parameters["image_size"])
        self.grid_batch = int(parameters["grid_batch"])
        self.cache = ByteLRU(
            int(parameters.get("cache_bytes", str(2**30))),
            float(parameters.get("cache_ttl_s", "900")),
        )

    def run(self, inputs: dict, call) -> dict:
        key = _image_id(inputs)
        out = {
            contract.PVS_IOU: np.zeros((1, 3), np.float32),
            contract.PVS_LOW_RES: np.zeros((1, 3, 1, 1), np.float32),
            contract.MASKS_RLE: np.zeros((0,), np.uint8),
            contract.PVS_GRID_LOW_RES: np.zeros((0, 3, 1, 1), np.float32),
            contract.PVS_GRID_IOU: np.zeros((0, 3), np.float32),
        }
        if contract.IMAGES in inputs:
            features = call(
                contract.ENCODER, {contract.IMAGES: inputs[contract.IMAGES]}, contract.PVS_FEATURES
            )
            self.cache.put(key, features)
        if contract.PVS_POINT_COORDS in inputs:
            out.update(decode_click(self._held(key), inputs, call, self.image_size))
        if contract.PVS_GRID_COORDS in inputs:
            out.update(decode_grid(self._held(key), inputs, call, self.grid_batch))
        return out

    def _held(self, key: str) -> dict:
        features = self.cache.get(key)
        if features is None:
            raise ValueError(
                f"image id {key!r} is not (or no longer) cached: send images_u8 again "
                "(features expire after inactivity or when newer images push them out)"
            )
        return features

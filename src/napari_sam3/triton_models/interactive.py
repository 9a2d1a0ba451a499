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

try:  # inside the napari_sam3 package
    from .. import contract
    from ..masks.rle import encode_masks
    from .cached import ByteLRU
    from .postprocess import upsample_threshold
except ImportError:  # the copies beside the Triton model
    import contract
    from cached import ByteLRU
    from postprocess import upsample_threshold
    from rle import encode_masks


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
            out.update(self._click(self._held(key), inputs, call))
        if contract.PVS_GRID_COORDS in inputs:
            out.update(self._grid(self._held(key), inputs, call))
        return out

    def _held(self, key: str) -> dict:
        features = self.cache.get(key)
        if features is None:
            raise ValueError(
                f"image id {key!r} is not (or no longer) cached: send images_u8 again "
                "(features expire after inactivity or when newer images push them out)"
            )
        return features

    def _click(self, features: dict, inputs: dict, call) -> dict:
        names = contract.PVS_PROMPTS
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ValueError(f"a prompt needs {', '.join(missing)}")
        prompt = {n: inputs[n] for n in names}
        result = call(contract.PVS_DECODER, {**features, **prompt}, contract.PVS_DECODER_OUTPUTS)
        low_res = np.asarray(result[contract.PVS_DECODER_MASKS], np.float32)
        masks = upsample_threshold(low_res[0], self.image_size, 0.0)
        return {
            contract.PVS_IOU: np.asarray(result[contract.PVS_DECODER_IOU], np.float32),
            contract.PVS_LOW_RES: low_res,
            contract.MASKS_RLE: np.frombuffer(encode_masks(masks), np.uint8),
        }

    def _grid(self, features: dict, inputs: dict, call) -> dict:
        coords = np.asarray(inputs[contract.PVS_GRID_COORDS], np.float32)
        labels = np.asarray(inputs.get(contract.PVS_GRID_LABELS), np.float32)
        if coords.ndim != 3 or coords.shape[-1] != 2 or labels.shape != coords.shape[:2]:
            raise ValueError("grid prompts are coords [N, P, 2] with labels [N, P]")
        low_res, iou = [], []
        b = self.grid_batch
        for start in range(0, len(coords), b):
            chunk_c, chunk_l = coords[start : start + b], labels[start : start + b]
            n = len(chunk_c)
            pad_c = np.zeros((b, *coords.shape[1:]), np.float32)
            pad_l = np.full((b, labels.shape[1]), -1, np.float32)
            pad_c[:n], pad_l[:n] = chunk_c, chunk_l
            result = call(
                contract.PVS_GRID_DECODER,
                {**features, contract.PVS_POINT_COORDS: pad_c, contract.PVS_POINT_LABELS: pad_l},
                contract.PVS_DECODER_OUTPUTS,
            )
            low_res.append(np.asarray(result[contract.PVS_DECODER_MASKS], np.float32)[:n])
            iou.append(np.asarray(result[contract.PVS_DECODER_IOU], np.float32)[:n])
        return {
            contract.PVS_GRID_LOW_RES: np.concatenate(low_res),
            contract.PVS_GRID_IOU: np.concatenate(iou),
        }

"""Client-side figures (issue 6): postprocess of 200 masks at 1008, and `multi` vs `segment`.

.venv/bin/python bench/bench_client.py [--models DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import timed, tiny_repository  # noqa: E402

from napari_sam3 import Sam3Client  # noqa: E402
from napari_sam3.client.results import detections_frame  # noqa: E402
from napari_sam3.imagery.letterbox import Letterbox  # noqa: E402
from napari_sam3.masks.rle import encode_masks  # noqa: E402


def synthetic_result(n: int = 200, size: int = 1008, seed: int = 0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    masks = np.zeros((n, size, size), bool)
    boxes = np.zeros((n, 4), np.float32)
    for i in range(n):
        cx, cy = rng.uniform(0, size, 2)
        rx, ry = rng.uniform(8, 120, 2)
        masks[i] = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1
        boxes[i] = [cx - rx, cy - ry, cx + rx, cy + ry]
    scores = np.sort(rng.uniform(0.3, 1.0, n))[::-1].astype(np.float32)
    return scores, np.clip(boxes, 0, size), np.frombuffer(encode_masks(masks), np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", help="an exported repository (default: export the tiny one)")
    args = parser.parse_args()

    scores, boxes, payload = synthetic_result()
    letterbox = Letterbox((4000, 3000), 1008)
    seconds, frame = timed(
        lambda: detections_frame(scores, boxes, payload, letterbox, 0.85, "x", "text"), repeat=10
    )
    print(
        f"client postprocess, 200 masks at 1008 (RLE decode + dedup 0.85 + box mapping): "
        f"{seconds * 1000:.1f} ms median, {len(frame)} kept (goal <= 100 ms)"
    )

    client = Sam3Client.local(tiny_repository(args.models))
    image = np.random.default_rng(1).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    prepared = client.prepare(image)
    words = ["building", "road", "water", "field", "tree", "car", "roof", "ship"]
    print(f"model: {client!r}")
    for n in (1, 3, 8):
        t_multi, _ = timed(lambda n=n: client.multi(prepared, words[:n], score_thr=0.0), repeat=3)
        t_single, _ = timed(
            lambda n=n: [client.segment(prepared, w, score_thr=0.0) for w in words[:n]], repeat=3
        )
        print(
            f"{n} keyword(s): multi {t_multi * 1000:.0f} ms, segment x{n} {t_single * 1000:.0f} ms, "
            f"ratio {t_single / t_multi:.2f}x"
        )


if __name__ == "__main__":
    main()

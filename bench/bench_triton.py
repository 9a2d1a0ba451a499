"""Triton figures (issue 5): RLE payload vs raw masks, and Triton round trip vs in-process.

.venv/bin/python bench/bench_triton.py [--models DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import timed, tiny_repository  # noqa: E402

from napari_sam3 import Sam3Client  # noqa: E402
from napari_sam3.runtime.postprocess import postprocess  # noqa: E402
from napari_sam3.serving.server import TritonServer  # noqa: E402


def full_size_payload(queries: int = 200, low_res: int = 288, size: int = 1008) -> None:
    """A full result: 200 queries of smooth random low-res logits through the real postprocess."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:low_res, :low_res] / low_res
    masks = np.empty((1, queries, low_res, low_res), np.float32)
    for q in range(queries):
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.02, 0.15)
        masks[0, q] = 8 * (r - np.hypot(xx - cx, yy - cy)) / r
    logits = np.full((1, queries), 5.0, np.float32)
    boxes = np.tile(np.array([0.1, 0.1, 0.2, 0.2], np.float32), (1, queries, 1))
    seconds, (scores, _, payload) = timed(
        lambda: postprocess(
            logits, boxes, masks, np.array([[5.0]], np.float32), size, 0.0, 0.5, 200
        ),
        repeat=2,
    )
    raw = len(scores) * size * size
    print(
        f"full result: {len(scores)} masks at {size}px, RLE payload {len(payload):,} B vs raw uint8 "
        f"{raw:,} B = {100 * len(payload) / raw:.3f} % (goal < 2 %); postprocess {seconds:.2f} s"
    )


def round_trip(models: Path) -> None:
    image = np.random.default_rng(1).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    local = Sam3Client.local(models)
    with TritonServer(models) as server:
        remote = Sam3Client(server.grpc_address)
        prepared = local.prepare(image)
        t_local, _ = timed(lambda: local.segment(prepared, "building", score_thr=0.0), repeat=10)
        t_remote, _ = timed(lambda: remote.segment(prepared, "building", score_thr=0.0), repeat=10)
        session_l, session_r = local.interactive(prepared), remote.interactive(prepared)
        c_local, _ = timed(lambda: session_l.add_point((100, 100)), repeat=10)
        c_remote, _ = timed(lambda: session_r.add_point((100, 100)), repeat=10)
    print(f"model: {local!r}")
    print(
        f"segment: in-process {t_local * 1000:.1f} ms, Triton (gRPC, python flavor) "
        f"{t_remote * 1000:.1f} ms, overhead {1000 * (t_remote - t_local):.1f} ms"
    )
    print(
        f"interactive click: in-process {c_local * 1000:.1f} ms, Triton {c_remote * 1000:.1f} ms, "
        f"overhead {1000 * (c_remote - c_local):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", help="an exported python-flavor repository (default: tiny)")
    args = parser.parse_args()
    full_size_payload()
    round_trip(tiny_repository(args.models))


if __name__ == "__main__":
    main()

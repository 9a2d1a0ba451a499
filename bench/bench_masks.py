"""Benchmark of the mask codec and dedup: prints its figures (docs/benchmarks.md records them).

A synthetic but realistic model output: N masks at S x S (default 200 at 1008), made of
independent objects (rectangles and ellipses, sizes log-uniform from a few pixels to a quarter of
the image), near duplicates of earlier masks (shifted by a few pixels) and parts nested inside
earlier masks, as SAM3's 200 queries produce.

    python bench/bench_masks.py [--n 200] [--size 1008] [--repeats 5] [--seed 0] [--noisy-only]

Noisy masks too (issue 23): the server's run-length encoder on noise-like masks (a random-weight
model's, and fragmented ones like fields and clouds), LEB128 before and now side by side.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from napari_sam3.masks import decode_masks, dedup_masks, encode_masks, paint_labels


def _shape(rng: np.random.Generator, size: int, cy: float, cx: float, r: float) -> tuple:
    """A filled ellipse or rectangle around (cy, cx): its slices and its pixels inside them."""
    ry, rx = r * rng.uniform(0.5, 1.5), r * rng.uniform(0.5, 1.5)
    y0, y1 = int(max(cy - ry, 0)), int(min(np.ceil(cy + ry) + 1, size))
    x0, x1 = int(max(cx - rx, 0)), int(min(np.ceil(cx + rx) + 1, size))
    if y1 <= y0 or x1 <= x0:
        y0, x0 = min(int(cy), size - 1), min(int(cx), size - 1)
        y1, x1 = y0 + 1, x0 + 1
    if rng.random() < 0.5:
        inside = np.ones((y1 - y0, x1 - x0), dtype=bool)
    else:
        yy = (np.arange(y0, y1)[:, None] - cy) / ry
        xx = (np.arange(x0, x1)[None, :] - cx) / rx
        inside = yy**2 + xx**2 <= 1.0
    return (slice(y0, y1), slice(x0, x1)), inside


def make_masks(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    masks = np.zeros((n, size, size), dtype=bool)
    for i in range(n):
        kind = rng.random()
        if i < 5 or kind < 0.6:
            r = float(np.exp(rng.uniform(np.log(3), np.log(size / 4))))
            where, inside = _shape(rng, size, *rng.uniform(0, size, 2), r)
            masks[i][where] = inside
        elif kind < 0.85:
            # Near duplicate: an earlier mask shifted by up to 3 pixels.
            j = int(rng.integers(0, i))
            dy, dx = rng.integers(-3, 4, 2)
            masks[i] = np.roll(masks[j], (int(dy), int(dx)), axis=(0, 1))
        else:
            # Nested part: a smaller shape clipped to an earlier mask.
            j = int(rng.integers(0, i))
            ys, xs = np.nonzero(masks[j])
            if ys.size == 0:
                continue
            k = int(rng.integers(0, ys.size))
            r = max(1.0, 0.3 * np.sqrt(ys.size / np.pi))
            where, inside = _shape(rng, size, float(ys[k]), float(xs[k]), r)
            masks[i][where] = inside & masks[j][where]
    scores = rng.random(n)
    return masks, scores


def make_crowded(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Worst case for dedup: large masks that all overlap one another."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((n, size, size), dtype=bool)
    for i in range(n):
        c = size / 2 + rng.uniform(-size / 8, size / 8, 2)
        where, inside = _shape(rng, size, *c, size * rng.uniform(0.15, 0.35))
        masks[i][where] = inside
    return masks, rng.random(n)


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time in ms over ``repeats`` runs, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), result


def run_case(name: str, masks: np.ndarray, scores: np.ndarray, repeats: int) -> None:
    n, h, w = masks.shape
    raw = masks.size  # bytes as uint8
    enc_ms, payload = timed(lambda: encode_masks(masks), repeats)
    dec_ms, batch = timed(lambda: decode_masks(payload), repeats)

    def decode_and_summarise() -> tuple[np.ndarray, np.ndarray]:
        decoded = decode_masks(payload)
        return decoded.areas, decoded.bboxes

    sum_ms, _ = timed(decode_and_summarise, repeats)

    def decode_and_dedup() -> np.ndarray:
        return dedup_masks(decode_masks(payload), scores, 0.85)

    dd_ms, kept = timed(decode_and_dedup, repeats)
    dense_ms, _ = timed(lambda: batch.take(kept).to_dense(), repeats)
    labels_ms, _ = timed(lambda: paint_labels(batch.take(kept), (h, w)), repeats)
    dense_dedup_ms, kept_dense = timed(lambda: dedup_masks(masks, scores, 0.85), repeats)
    assert np.array_equal(kept, kept_dense)

    print(f"\n== {name}: {n} masks of {h}x{w}, foreground {masks.mean():.2%} of pixels")
    print(f"runs (all masks)             : {batch.runs.size}")
    print(f"encode_masks                 : {enc_ms:8.1f} ms")
    print(
        f"payload                      : {len(payload):8d} bytes = {100 * len(payload) / raw:.3f} % "
        f"of {raw} raw uint8 bytes"
    )
    print(f"decode_masks (parse, lazy)   : {dec_ms:8.2f} ms")
    print(f"decode + areas + bboxes      : {sum_ms:8.2f} ms")
    print(f"decode + dedup_masks(0.85)   : {dd_ms:8.2f} ms  ({kept.size} of {n} kept)")
    print(f"dense kept masks [K,H,W]     : {dense_ms:8.1f} ms")
    print(f"label image of kept masks    : {labels_ms:8.1f} ms")
    print(f"dedup_masks on dense input   : {dense_dedup_ms:8.1f} ms (includes encoding)")
    frame = pd.DataFrame({"mask": batch.as_list(), "area": batch.areas})
    print(f"DataFrame of {n} RleMask, pickled: {len(pickle.dumps(frame))} bytes")


def leb128_before(values: np.ndarray) -> np.ndarray:
    """The LEB128 encoder of 2026-11-30 (one pass per possible byte, uint64, fancy indexing),
    kept here only as the "before" of the noisy-mask figures."""
    v = values.astype(np.uint64)
    nbytes = np.ones(v.size, dtype=np.int64)
    for k in range(1, 9):
        nbytes += v >= np.uint64(1 << (7 * k))
    ends = np.cumsum(nbytes)
    out = np.empty(int(ends[-1]) if ends.size else 0, dtype=np.uint8)
    starts = ends - nbytes
    for k in range(int(nbytes.max()) if nbytes.size else 0):
        sel = np.flatnonzero(nbytes > k)
        byte = (v[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (nbytes[sel] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[sel] + k] = (byte | more).astype(np.uint8)
    return out


def noisy_logits(n: int, size: int, seed: int, kind: str) -> np.ndarray:
    """Low-res mask logits (size / 3.5 px) whose masks are noise-like: "random" (a random-weight
    model: white noise, each mask its own), "fields" (smooth blobs of a few low-res pixels with
    noise on them, like fields, water, shadows and clouds in real imagery)."""
    rng = np.random.default_rng(seed)
    m = round(size / 3.5)
    if kind == "random":
        return rng.normal(0, 1, (n, m, m)).astype(np.float32)
    if kind == "copies":  # noise shared in part by every mask: what random weights give
        shared = rng.normal(0, 1, (1, m, m))
        return (shared + rng.normal(0, 0.3, (n, m, m))).astype(np.float32)
    coarse = rng.normal(0, 1, (n, m // 4 + 1, m // 4 + 1))
    smooth = np.repeat(np.repeat(coarse, 4, axis=1), 4, axis=2)[:, :m, :m]
    return (smooth + rng.normal(0, 0.6, (n, m, m)) - 0.3).astype(np.float32)


def run_noisy(kind: str, n: int, size: int, seed: int, repeats: int) -> None:
    """The server's encoder on fragmented masks: LEB128 and the whole payload, before and now."""
    from napari_sam3.masks import rle as rle_module
    from napari_sam3.runtime.postprocess import threshold_masks

    batch = threshold_masks(noisy_logits(n, size, seed, kind), size, 0.0)
    values = np.concatenate([batch.counts, batch.runs])
    before_ms, before = timed(lambda: leb128_before(values), repeats)
    now_ms, now = timed(lambda: rle_module._leb128_encode(values), repeats)
    assert before.tobytes() == now.tobytes()  # byte-identical
    pay_ms, payload = timed(batch.to_bytes, repeats)
    crops_ms, _ = timed(lambda: threshold_masks(noisy_logits(n, size, seed, kind), size, 0.0), 1)
    area = batch.areas.sum() / (n * size * size)
    print(f"\n== noisy, {kind}: {n} masks of {size}x{size}, foreground {area:.1%}")
    print(f"runs (all masks)             : {batch.runs.size}")
    print(
        f"LEB128 before / now          : {before_ms:8.1f} / {now_ms:.1f} ms = {before_ms / now_ms:.1f}x"
    )
    print(f"payload (now), whole         : {pay_ms:8.1f} ms, {len(payload)} bytes")
    print(f"threshold + runs from crops  : {crops_ms:8.1f} ms (postprocess, one run)")


def run_kernels(kind: str, n: int, size: int, seed: int, repeats: int) -> None:
    """The full-resolution mask work of a prompt (threshold + runs, dedup 0.85), numpy reference
    against the compiled kernels, same input, identical results (checked here)."""
    from napari_sam3.masks import rle_kernels
    from napari_sam3.masks.dedup import dedup_masks
    from napari_sam3.masks.rle import RleMasks
    from napari_sam3.runtime.postprocess import threshold_masks

    logits = noisy_logits(n, size, seed, kind)
    scores = np.linspace(1.0, 0.5, n)
    figures, results = {}, {}
    for name, enabled in (("numpy", False), ("compiled", True)):
        rle_kernels.ENABLED = enabled
        threshold_masks(logits[:2], size, 0.0)  # compiled (or loaded from the cache) first
        made_ms, batch = timed(lambda: threshold_masks(logits, size, 0.0), repeats)

        def dedup(batch=batch):  # a fresh batch each time: nothing remembered
            fresh = RleMasks._from_runs(batch.runs, batch.counts, batch.shape)
            fresh._bboxes, fresh._areas = batch.bboxes, batch.areas
            fresh._spans = batch.spans()
            return dedup_masks(fresh, scores, 0.85)

        dedup_ms, kept = timed(dedup, repeats)
        figures[name] = (made_ms, dedup_ms)
        results[name] = (batch.runs, kept)
    rle_kernels.ENABLED = rle_kernels.AVAILABLE
    assert np.array_equal(results["numpy"][0], results["compiled"][0])
    assert np.array_equal(results["numpy"][1], results["compiled"][1])
    (a, b), (c, d) = figures["numpy"], figures["compiled"]
    print(f"\n== kernels, {kind}: {n} masks of {size}x{size}, {results['numpy'][0].size} runs")
    print(f"threshold + runs numpy / compiled : {a:8.1f} / {c:.1f} ms = {a / c:.1f}x")
    print(f"dedup 0.85       numpy / compiled : {b:8.1f} / {d:.1f} ms = {b / d:.1f}x")
    print(
        f"both             numpy / compiled : {a + b:8.1f} / {c + d:.1f} ms = {(a + b) / (c + d):.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--size", type=int, default=1008)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noisy-only", action="store_true")
    parser.add_argument(
        "--kernels-only", action="store_true", help="only numpy vs the compiled mask kernels"
    )
    args = parser.parse_args()
    for kind in ("random", "copies", "fields"):
        run_kernels(kind, args.n, args.size, args.seed, args.repeats)
    if args.kernels_only:
        return
    for kind in ("random", "fields"):
        run_noisy(kind, args.n, args.size, args.seed, min(args.repeats, 3))
    if args.noisy_only:
        return
    masks, scores = make_masks(args.n, args.size, args.seed)
    run_case("realistic", masks, scores, args.repeats)
    del masks
    masks, scores = make_crowded(args.n, args.size, args.seed)
    run_case("crowded (all overlap)", masks, scores, args.repeats)


if __name__ == "__main__":
    main()

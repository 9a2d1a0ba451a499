"""Time and memory of the percentile stretch of one full Sentinel-2-sized band (10980 x 10980).

Issue target: at most 2 s and at most 3x the band's own bytes of extra memory for a uint16 band.
Synthetic 12-bit data (triangular histogram), a nodata=0 strip as at a swath edge, and 1000 hot
pixels at 65535. Extra memory is the tracemalloc peak above the input (numpy reports its buffers
to tracemalloc), and it includes the uint8 (rows, cols, 3) output, which alone is 1.5x the band.

    python bench/bench_stretch.py            # uint16, the issue's figure
    python bench/bench_stretch.py --float    # also a float32 reflectance band (subsampled stats)
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from napari_sam3.imagery.stretch import compute_stretch, to_model_rgb

SIDE = 10980


def synthetic_band(dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    band = np.empty((SIDE, SIDE), dtype=dtype)
    for r in range(0, SIDE, 1024):  # built in chunks so the generator's temporaries stay small
        shape = (min(1024, SIDE - r), SIDE)
        values = rng.integers(0, 2048, shape, dtype=np.uint16)
        values += rng.integers(0, 2048, shape, dtype=np.uint16)
        band[r : r + 1024] = values if dtype == "uint16" else values / np.float32(10000)
    band[:, :400] = 0  # nodata strip
    hot = rng.choice(band.size, 1000, replace=False)
    band.ravel()[hot] = 65535 if dtype == "uint16" else 6.5535
    return band


def measure(label: str, band_bytes: int, fn: Callable[[], object], repeats: int) -> None:
    times, peaks = [], []
    for _ in range(repeats):
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()
        del result
    peak = max(peaks)
    print(
        f"  {label:<38} best {min(times):6.3f} s  median {statistics.median(times):6.3f} s  "
        f"extra memory peak {peak / 2**20:7.1f} MiB = {peak / band_bytes:4.2f}x the band"
    )


def bench(dtype: str, repeats: int) -> None:
    band = synthetic_band(dtype)
    nbytes = band.nbytes
    print(f"{dtype} band {SIDE} x {SIDE}: {nbytes / 2**20:.1f} MiB ({nbytes:,} bytes)")
    stats = compute_stretch(band, nodata=0)
    print(f"  stats: low {stats.low[0]:g}, high {stats.high[0]:g} (percentiles 2, 98; nodata=0)")
    measure("compute_stretch", nbytes, lambda: compute_stretch(band, nodata=0), repeats)
    measure(
        "to_model_rgb(stats=...) apply only",
        nbytes,
        lambda: to_model_rgb(band, stats=stats, nodata=0),
        repeats,
    )
    measure(
        "to_model_rgb (stats + apply) -> RGB",
        nbytes,
        lambda: to_model_rgb(band, nodata=0),
        repeats,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--float", action="store_true", help="also bench a float32 band")
    args = parser.parse_args()
    bench("uint16", args.repeats)
    if args.float:
        bench("float32", args.repeats)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"process peak RSS {peak_rss:.0f} MiB (includes the synthetic input and its generation)")


if __name__ == "__main__":
    main()

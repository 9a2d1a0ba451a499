"""Compiled kernels for the full-resolution mask work, where numba is installed.

Fragmented masks (noise-like model output, fields, water, clouds) have tens of thousands of
runs each, and the numpy steps that build and compare them (thresholding upsampled logits,
finding the runs, counting overlaps) spend their time on temporaries. These kernels do the same
work in one pass per mask and give identical results: the numpy code in ``postprocess.py``,
``rle.py`` and ``dedup.py`` is the reference, and the tests compare both on every host.

:data:`ENABLED` is True where numba imports; otherwise (or when set to False) the callers run
the numpy code. The kernels are compiled on first use (about 3 s, once) and cached on disk by
numba: in ``NUMBA_CACHE_DIR`` where set, else in the ``__pycache__`` folder beside this file
where that is writable (as Python's bytecode); otherwise they are compiled in each process
(nothing is written under HOME). Loading them from the cache takes a few tenths of a second at
the first use in a process. Like ``rle.py`` this module depends on numpy (and numba) only: it is
copied beside the Triton postprocess model.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:
    import numba
except ImportError:  # the numpy reference code runs instead
    numba = None

AVAILABLE = numba is not None
ENABLED = AVAILABLE

ONE = np.uint64(1)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _disk_cache() -> bool:
    """Cache compiled kernels on disk where numba would write beside this file (as Python's own
    bytecode) or where NUMBA_CACHE_DIR says; never in numba's fallback under HOME."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    folder = os.path.dirname(os.path.abspath(__file__))
    cache = os.path.join(folder, "__pycache__")
    return os.access(cache if os.path.isdir(cache) else folder, os.W_OK)


_CACHE = _disk_cache()


def _jit(function):
    if numba is None:
        return function
    # nogil: masks are spread over threads; no fastmath, so float32 arithmetic stays exactly
    # numpy's (no fused multiply-add, no reordering).
    return numba.njit(nogil=True, cache=_CACHE)(function)


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def spread(function, items: list) -> list:
    """``[function(item) ...]``, spread over a thread pool when there is more than one item."""
    global _pool, _pool_pid
    if len(items) < 2 or _workers() < 2:
        return [function(item) for item in items]
    with _pool_lock:
        # a forked child (dask, multiprocessing) inherits the pool without its threads
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(_workers(), thread_name_prefix="sam3-masks")
            _pool_pid = os.getpid()
    return list(_pool.map(function, items))


# ---------------------------------------------------------------------------------------------
# low-res logits -> runs


@_jit
def _threshold_edges(
    low, cut, row_lo, row_hi, row_a, row_b, col_lo, col_hi, col_a, col_b, size, like
):
    """One mask's foreground edges (start, end, start, end, ... as flat positions within the
    mask) and box of ``bilinear(low) > cut``, evaluated only inside the window the numpy
    reference (``postprocess.threshold_crops``) evaluates: ``(edges, box)``."""
    h, w = low.shape
    box = np.zeros(4, dtype=np.int64)
    rmin, rmax, cmin, cmax = h, -1, w, -1
    for i in range(h):
        for j in range(w):
            if low[i, j] > cut:
                rmin = min(rmin, i)
                rmax = i
                cmin = min(cmin, j)
                cmax = max(cmax, j)
    if rmax < 0:
        return np.zeros(0, dtype=like.dtype), box
    # output rows / columns whose bilinear sources touch the low-res pixels above the cut
    r0, r1 = size, -1
    for y in range(size):
        if row_hi[y] >= rmin and row_lo[y] <= rmax:
            r0 = min(r0, y)
            r1 = y
    c0, c1 = size, -1
    for x in range(size):
        if col_hi[x] >= cmin and col_lo[x] <= cmax:
            c0 = min(c0, x)
            c1 = x
    w0, w1 = col_lo[c0], col_hi[c1] + 1
    lo = col_lo[c0 : c1 + 1] - w0
    hi = col_hi[c0 : c1 + 1] - w0
    ga, gb = col_a[c0 : c1 + 1], col_b[c0 : c1 + 1]
    span = c1 - c0 + 1
    edges = np.empty((r1 - r0 + 1) * (span + 1), dtype=like.dtype)
    tall = np.empty(w1 - w0, dtype=np.float32)
    k = 0
    y0, y1, x0, x1 = size, -1, size, -1
    for y in range(r0, r1 + 1):
        a, b = row_a[y], row_b[y]
        lo_row, hi_row = low[row_lo[y]], low[row_hi[y]]
        for j in range(w0, w1):
            tall[j - w0] = lo_row[j] * a + hi_row[j] * b
        # branchless: a position is written at every pixel, kept where the value changes (one
        # loop with the interpolation: 1.75x faster than a separate foreground row)
        first = k
        at = y * size + c0
        previous = False
        for x in range(span):
            inside = tall[lo[x]] * ga[x] + tall[hi[x]] * gb[x] > cut
            edges[k] = at + x
            k += inside != previous
            previous = inside
        if previous:
            edges[k] = at + span
            k += 1
        if k == first:
            continue
        y0 = min(y0, y)
        y1 = y
        x0 = min(x0, edges[first] - y * size)
        x1 = max(x1, edges[k - 1] - y * size)
        if first and edges[first - 1] == edges[first]:
            # a run going on from the end of the row above: join (full-width crops only)
            for i in range(first + 1, k):
                edges[i - 2] = edges[i]
            k -= 2
    if k:
        box[0], box[1], box[2], box[3] = x0, y0, x1, y1 + 1
    return edges[:k], box


@_jit
def _fill(edges, starts, ends):
    """A mask's intervals from its edges; returns its area."""
    area = 0
    for i in range(edges.size // 2):
        starts[i] = edges[2 * i]
        ends[i] = edges[2 * i + 1]
        area += ends[i] - starts[i]
    return area


def threshold_intervals(logits, cut, rows: tuple, cols: tuple, size: int) -> tuple:
    """Each of the [N, h, w] float32 low-res logits (or a list of [h, w]) upsampled bilinearly
    to ``size`` x ``size`` and thresholded at ``cut``, as ``(starts, ends, k, boxes, areas)``:
    all masks' foreground intervals (positions within each mask), the number of each mask's
    intervals, their boxes and areas. No runs are made (``RleMasks`` makes them when asked: noise-like masks have
    millions, and held at 8 bytes each they tripled what a result takes). ``rows`` / ``cols``:
    ``(lo, hi, 1 - f, f)`` of each output row / column (``postprocess.axis_weights``)."""
    logits = [np.ascontiguousarray(low, dtype=np.float32) for low in logits]
    cut = np.float32(cut)
    rows = _weights(rows)
    cols = _weights(cols)
    # positions (edges, intervals) within one mask fit 32 bits at any real frame: half the memory
    like = np.zeros(0, dtype=np.int32 if size * size < 2**31 else np.int64)
    found = spread(lambda low: _threshold_edges(low, cut, *rows, *cols, size, like), logits)
    n = len(found)
    boxes = np.zeros((n, 4), dtype=np.int64)
    k = np.zeros(n, dtype=np.int64)
    for i, (edges, box) in enumerate(found):
        boxes[i] = box
        k[i] = edges.size // 2
    starts = np.empty(int(k.sum()), dtype=like.dtype)
    ends = np.empty(int(k.sum()), dtype=like.dtype)
    at = np.cumsum(k) - k

    def fill(i: int) -> int:
        part = slice(at[i], at[i] + k[i])
        return _fill(found[i][0], starts[part], ends[part])

    areas = np.array(spread(fill, list(range(n))), dtype=np.int64)
    return starts, ends, k, boxes, areas


def _weights(axis: tuple) -> tuple:
    lo, hi, a, b = axis
    return (
        np.ascontiguousarray(lo, dtype=np.int64),
        np.ascontiguousarray(hi, dtype=np.int64),
        np.ascontiguousarray(a, dtype=np.float32),
        np.ascontiguousarray(b, dtype=np.float32),
    )


# ---------------------------------------------------------------------------------------------
# dedup: packed rows and intersection counts


@_jit
def _pack_rows(starts, ends, y0, y1, w, word0, words, out):
    """Rows ``y0:y1`` of a mask given by its intervals (positions within the mask) into the
    zeroed ``out``, ``words`` a row: pixel x in bit ``x % 64`` of word ``x // 64 - word0``."""
    lo, hi = y0 * w, y1 * w
    # the row is followed as the sorted intervals go, not divided out of each position: an
    # integer division an interval was half of packing noise-like masks
    y, row_start = y0, lo
    for i in range(starts.size):
        s, e = max(starts[i], lo), min(ends[i], hi)
        while s < e:
            while s >= row_start + w:
                y += 1
                row_start += w
            stop = min(e, row_start + w)
            x, x_end = s - row_start, stop - row_start
            row = (y - y0) * words - word0
            while x < x_end:
                bit = x & 63
                n = min(64 - bit, x_end - x)
                fill = ALL if n == 64 else (ONE << np.uint64(n)) - ONE
                out[row + (x >> 6)] |= fill << np.uint64(bit)
                x += n
            s = stop


@_jit
def _popcount(v):
    v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (v * np.uint64(0x0101010101010101)) >> np.uint64(56)


@_jit
def _and_counts(store, at, rows, word0, words, a, b, y0, y1, x0, x1, out):
    """Set bits of ``A & B`` for each pair, over rows ``y0:y1`` and the words holding pixel
    columns ``x0:x1``; mask ``i``'s row ``y`` starts at ``at[i] + (y - rows[i]) * words[i]``
    in ``store``, its first word being the frame's word ``word0[i]``."""
    for p in range(a.size):
        if y1[p] <= y0[p] or x1[p] <= x0[p]:
            continue
        i, j = a[p], b[p]
        k0, k1 = x0[p] >> 6, (x1[p] + 63) >> 6
        total = np.uint64(0)
        for y in range(y0[p], y1[p]):
            pa = at[i] + (y - rows[i]) * words[i] - word0[i]
            pb = at[j] + (y - rows[j]) * words[j] - word0[j]
            for k in range(k0, k1):
                total += _popcount(store[pa + k] & store[pb + k])
        out[p] = total


class PackedMasks:
    """The masks of a batch as bits, each packed when first needed: its rows within its box,
    64 pixels a word on the frame's grid of 64 columns (pixel x in bit ``x % 64`` of word
    ``x // 64``), for exact intersection counts of fragmented masks. One growing store."""

    def __init__(self, boxes: np.ndarray, w: int) -> None:
        self.boxes = np.asarray(boxes, dtype=np.int64)
        self.w = int(w)
        self.rows = np.ascontiguousarray(self.boxes[:, 1])
        self.word0 = np.ascontiguousarray(self.boxes[:, 0] >> 6)
        self.words = np.maximum(((self.boxes[:, 2] + 63) >> 6) - self.word0, 0)
        self.at = np.full(len(self.boxes), -1, dtype=np.int64)
        self.store = np.zeros(0, dtype=np.uint64)
        self.used = 0

    def pack(self, masks, starts: np.ndarray, ends: np.ndarray, offsets: np.ndarray) -> None:
        """Pack ``masks`` not packed yet (``starts``/``ends``: the batch's intervals, positions
        within each mask, mask ``i``'s at ``offsets[i]:offsets[i + 1]``)."""
        todo = np.unique(np.asarray(masks, dtype=np.int64))
        todo = todo[self.at[todo] < 0]
        if todo.size == 0:
            return
        sizes = (self.boxes[todo, 3] - self.boxes[todo, 1]) * self.words[todo]
        need = self.used + int(sizes.sum())
        if need > self.store.size:  # grown by doubling: copies stay linear in the total
            grown = np.zeros(max(need, 2 * self.store.size), dtype=np.uint64)
            grown[: self.used] = self.store[: self.used]
            self.store = grown
        self.at[todo] = self.used + np.cumsum(sizes) - sizes
        self.used = need

        def one(i: int) -> None:
            x0, y0, x1, y1 = (int(v) for v in self.boxes[i])
            lo, hi = offsets[i], offsets[i + 1]
            at, size = int(self.at[i]), (y1 - y0) * int(self.words[i])
            part = self.store[at : at + size]
            _pack_rows(
                starts[lo:hi], ends[lo:hi], y0, y1, self.w, x0 >> 6, int(self.words[i]), part
            )

        spread(one, todo.tolist())

    def and_counts(self, a, b, y0, y1, x0, x1) -> np.ndarray:
        """``|A & B|`` of packed masks ``a[p]``, ``b[p]``, counted where both boxes meet (rows
        ``y0:y1``, pixel columns ``x0:x1``; whole words around them, as both masks are empty
        outside their boxes)."""
        args = [np.ascontiguousarray(v, dtype=np.int64) for v in (a, b, y0, y1, x0, x1)]
        out = np.zeros(args[0].size, dtype=np.int64)
        step = max(1, -(-out.size // _workers()))
        fixed = (self.store, self.at, self.rows, self.word0, self.words)

        def one(lo: int) -> None:
            _and_counts(*fixed, *(v[lo : lo + step] for v in args), out[lo : lo + step])

        spread(one, list(range(0, out.size, step)))
        return out


@_jit
def _in_rows(starts, ends, offsets, masks, y0, y1, w):
    first = np.empty(masks.size, dtype=np.int64)
    count = np.empty(masks.size, dtype=np.int64)
    for p in range(masks.size):
        lo, hi = offsets[masks[p]], offsets[masks[p] + 1]
        f = lo + np.searchsorted(ends[lo:hi], y0[p] * w, side="right")
        stop = lo + np.searchsorted(starts[lo:hi], y1[p] * w, side="left")
        first[p] = f
        count[p] = max(stop - f, 0)
    return first, count


def in_rows(starts, ends, offsets, masks, y0, y1, w: int) -> tuple[np.ndarray, np.ndarray]:
    """First index and number of each ``masks[p]``'s intervals touching rows
    ``y0[p] <= y < y1[p]`` (``starts``/``ends``: positions within each mask, mask ``i``'s
    being ``offsets[i]:offsets[i + 1]``)."""
    as64 = lambda v: np.ascontiguousarray(v, dtype=np.int64)  # noqa: E731
    return _in_rows(starts, ends, as64(offsets), as64(masks), as64(y0), as64(y1), int(w))

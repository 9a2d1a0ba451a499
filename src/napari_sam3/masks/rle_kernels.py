"""Compiled kernels for the full-resolution mask work, where numba is installed.

Fragmented masks (noise-like model output, fields, water, clouds) have tens of thousands of
runs each, and the numpy steps that build and compare them (thresholding upsampled logits,
finding the runs, counting overlaps) spend their time on temporaries. These kernels do the same
work in one pass per mask and give identical results: the numpy code in ``postprocess.py``,
``rle.py``, ``dedup.py`` and :class:`PackedMasks` is the reference, and the tests compare both
on every host. :class:`PackedMasks` is the one owner of the packed-bits layout.

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

if __package__:  # inside napari_sam3
    from napari_sam3.core.errors import InvalidInput
else:  # the copy beside a Triton Python model (sam3-export copies errors.py)
    from errors import InvalidInput

AVAILABLE = numba is not None
ENABLED = AVAILABLE

ZERO = np.uint64(0)
ONE = np.uint64(1)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
# 8 bytes of 0 or 1 times _GATHER: byte i's value lands in bit 56 + i, with no carries
_GATHER = np.uint64(0x0102040810204080)
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DE_BRUIJN_INDEX = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _DE_BRUIJN_INDEX[((0x03F79D71B4CB0A89 << _i) & 0xFFFFFFFFFFFFFFFF) >> 58] = _i
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_size = 0
_pool_lock = threading.Lock()
_thread_limit = 0  # set_threads: 0 is every CPU this process may use


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


def set_threads(threads: int) -> None:
    """Run the mask kernels on at most `threads` threads in this process (0: every CPU it may
    use). The embedded engine sets its own `threads` here, so that a client asked for 2 threads
    does not threshold masks on 16. One process-wide limit: the last engine made sets it."""
    global _thread_limit
    threads = int(threads)
    if threads < 0:
        raise InvalidInput(f"threads must be >= 0 (0: every CPU), got {threads}")
    with _pool_lock:
        _thread_limit = threads  # the next spread makes a pool of the new size if it differs


def workers() -> int:
    """Threads the mask kernels use: the CPUs this process may use, capped by `set_threads`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, _thread_limit) if _thread_limit else cpus)


def spread(function, items: list) -> list:
    """``[function(item) ...]``, spread over a thread pool when there is more than one item."""
    global _pool, _pool_pid, _pool_size
    n = workers()
    if len(items) < 2 or n < 2:
        return [function(item) for item in items]
    with _pool_lock:
        # a forked child (dask, multiprocessing) inherits the pool without its threads
        if _pool is None or _pool_pid != os.getpid() or _pool_size != n:
            _pool = ThreadPoolExecutor(n, thread_name_prefix="sam3-masks")
            _pool_pid, _pool_size = os.getpid(), n
        pool = _pool
    return list(pool.map(function, items))


# ---------------------------------------------------------------------------------------------
# low-res logits -> runs


@_jit
def _low_bit(v):
    """Index of the lowest set bit of a nonzero uint64 (de Bruijn)."""
    return _DE_BRUIJN_INDEX[((v & (~v + ONE)) * _DE_BRUIJN) >> np.uint64(58)]


@_jit
def _high_bit(v):
    """Index of the highest set bit of a nonzero uint64."""
    for shift in (1, 2, 4, 8, 16, 32):
        v |= v >> np.uint64(shift)
    return _DE_BRUIJN_INDEX[((v - (v >> ONE)) * _DE_BRUIJN) >> np.uint64(58)]


@_jit
def _window(low, cut, row_lo, row_hi, col_lo, col_hi, size):
    """``(r0, r1, c0, c1)``: the output rows and columns (ends included) whose bilinear sources
    touch a low-res pixel above `cut`, where the mask can be (r1 is -1 if none is)."""
    h, w = low.shape
    rmin, rmax, cmin, cmax = h, -1, w, -1
    for i in range(h):
        for j in range(w):
            if low[i, j] > cut:
                rmin = min(rmin, i)
                rmax = i
                cmin = min(cmin, j)
                cmax = max(cmax, j)
    r0, r1 = size, -1
    if rmax < 0:
        return r0, r1, size, -1
    for y in range(size):
        if row_hi[y] >= rmin and row_lo[y] <= rmax:
            r0 = min(r0, y)
            r1 = y
    c0, c1 = size, -1
    for x in range(size):
        if col_hi[x] >= cmin and col_lo[x] <= cmax:
            c0 = min(c0, x)
            c1 = x
    return r0, r1, c0, c1


@_jit
def _threshold_bits(low, cut, row_lo, row_hi, row_a, row_b, col_lo, col_hi, col_a, col_b, size):
    """One mask's ``bilinear(low) > cut``, evaluated only inside the window the numpy reference
    (``postprocess.threshold_crops``) evaluates, packed as :class:`PackedMasks` packs a mask
    (its rows within its box, 64 pixels a word on the frame's grid of 64 columns):
    ``(bits, box, area, intervals, last pixel set)``."""
    box = np.zeros(4, dtype=np.int64)
    r0, r1, c0, c1 = _window(low, cut, row_lo, row_hi, col_lo, col_hi, size)
    if r1 < 0:
        return np.zeros(0, dtype=np.uint64), box, 0, 0, False
    w0, w1 = col_lo[c0], col_hi[c1] + 1
    # unsigned: no negative-index wrap-around in the column loop (1.25x faster)
    lo = (col_lo[c0 : c1 + 1] - w0).astype(np.uint32)
    hi = (col_hi[c0 : c1 + 1] - w0).astype(np.uint32)
    ga, gb = col_a[c0 : c1 + 1], col_b[c0 : c1 + 1]
    span = c1 - c0 + 1
    word0 = c0 >> 6
    words = ((c1 + 64) >> 6) - word0
    skip = c0 - word0 * 64
    bits = np.zeros((r1 - r0 + 1) * words, dtype=np.uint64)
    # one row's pixels as bytes (0 or 1), read 8 at a time: the comparison stays a plain loop
    # the compiler vectorises, and the bytes become bits by one multiplication (_GATHER)
    pixels = np.zeros(words * 64, dtype=np.uint8)
    eights = pixels.view(np.uint64)
    tall = np.empty(w1 - w0, dtype=np.float32)
    area = 0
    k = 0
    last = ZERO  # the pixel before this row's first in the mask's flat order
    y0, y1, x0, x1 = size, -1, size, -1
    reach_end = c1 == size - 1  # the last column is evaluated
    wraps = word0 == 0 and reach_end  # a run can go on from one row's end to the next
    for y in range(r0, r1 + 1):
        a, b = row_a[y], row_b[y]
        lo_row, hi_row = low[row_lo[y]], low[row_hi[y]]
        for j in range(w0, w1):
            tall[j - w0] = lo_row[j] * a + hi_row[j] * b
        for x in range(span):
            pixels[skip + x] = tall[lo[x]] * ga[x] + tall[hi[x]] * gb[x] > cut
        row = (y - r0) * words
        carry = last if wraps else ZERO
        first, final = -1, -1
        for q in range(words):
            word = ZERO
            for m in range(8):
                word |= ((eights[q * 8 + m] * _GATHER) >> np.uint64(56)) << np.uint64(8 * m)
            bits[row + q] = word
            if word:
                area += np.int64(_popcount(word))
                k += np.int64(_popcount(word & ~((word << ONE) | carry)))
                if first < 0:
                    first = q
                final = q
            carry = word >> np.uint64(63)
        if reach_end:
            q = ((size - 1) >> 6) - word0
            last = (bits[row + q] >> np.uint64((size - 1) & 63)) & ONE
        if first < 0:
            continue
        y0 = min(y0, y)
        y1 = y
        x0 = min(x0, (word0 + first) * 64 + _low_bit(bits[row + first]))
        x1 = max(x1, (word0 + final) * 64 + _high_bit(bits[row + final]) + 1)
    if k == 0:
        return np.zeros(0, dtype=np.uint64), box, 0, 0, False
    box[0], box[1], box[2], box[3] = x0, y0, x1, y1 + 1
    # the rows and words of the box only
    b0 = x0 >> 6
    b_words = ((x1 + 63) >> 6) - b0
    out = np.empty((y1 + 1 - y0) * b_words, dtype=np.uint64)
    for y in range(y0, y1 + 1):
        for q in range(b_words):
            out[(y - y0) * b_words + q] = bits[(y - r0) * words + b0 - word0 + q]
    last_on = reach_end and r1 == size - 1 and last == ONE
    return out, box, area, k, last_on


@_jit
def _above(low, cut, row_lo, row_hi, row_a, row_b, col_lo, col_hi, col_a, col_b, y, x):
    """Pixel (y, x) of the upsampled mask, with `_threshold_bits`'s arithmetic (rows first)."""
    a, b = row_a[y], row_b[y]
    left = low[row_lo[y], col_lo[x]] * a + low[row_hi[y], col_lo[x]] * b
    right = low[row_lo[y], col_hi[x]] * a + low[row_hi[y], col_hi[x]] * b
    return left * col_a[x] + right * col_b[x] > cut


@_jit
def _first_line(low, cut, weights, rows, first, stop, step, inner0, inner1):
    """The first of the lines ``range(first, stop, step)`` (rows if `rows`, else columns) with
    a pixel above `cut` between ``inner0`` and ``inner1`` (ends included); -1 if none has."""
    for line in range(first, stop, step):
        for other in range(inner0, inner1 + 1):
            y, x = (line, other) if rows else (other, line)
            if _above(low, cut, *weights, y, x):
                return line
    return -1


@_jit
def _threshold_box(low, cut, row_lo, row_hi, row_a, row_b, col_lo, col_hi, col_a, col_b, size):
    """The box ``(x1, y1, x2, y2)`` of the mask `_threshold_bits` makes of `low` (zeros if
    empty), without making it: in the same window, rows are evaluated from its top and bottom
    and columns from its sides until one holds a pixel above `cut`. A mask of any extent
    stops at its first rows and columns; a sparse one costs at most its window twice."""
    box = np.zeros(4, dtype=np.int64)
    r0, r1, c0, c1 = _window(low, cut, row_lo, row_hi, col_lo, col_hi, size)
    if r1 < 0:
        return box
    weights = (row_lo, row_hi, row_a, row_b, col_lo, col_hi, col_a, col_b)
    y0 = _first_line(low, cut, weights, True, r0, r1 + 1, 1, c0, c1)
    if y0 < 0:
        return box
    y1 = _first_line(low, cut, weights, True, r1, y0 - 1, -1, c0, c1)  # y0 at the latest
    x0 = _first_line(low, cut, weights, False, c0, c1 + 1, 1, y0, y1)
    x1 = _first_line(low, cut, weights, False, c1, x0 - 1, -1, y0, y1)
    box[0], box[1], box[2], box[3] = x0, y0, x1 + 1, y1 + 1
    return box


def threshold_boxes(logits, cut, rows: tuple, cols: tuple, size: int) -> np.ndarray:
    """int64 [N, 4] boxes of the masks `threshold_bits` makes of the [N, h, w] logits (or a
    list of [h, w]), found without making the masks (see `_threshold_box`)."""
    cut = np.float32(cut)
    rows = _weights(rows)
    cols = _weights(cols)
    boxes = [
        _threshold_box(np.ascontiguousarray(low, dtype=np.float32), cut, *rows, *cols, size)
        for low in logits
    ]
    return np.array(boxes, dtype=np.int64).reshape(len(boxes), 4)


def threshold_bits(logits, cut, rows: tuple, cols: tuple, size: int) -> tuple:
    """Each of the [N, h, w] float32 low-res logits (or a list of [h, w]) upsampled bilinearly
    to ``size`` x ``size`` and thresholded at ``cut``, as ``(packed, k, last_on)``: the masks
    as :class:`PackedMasks` (every one packed, with their boxes and areas), the number of each
    mask's foreground intervals and whether its last pixel is foreground. No interval or run
    is written (``RleMasks`` asks the bits for them when needed: noise-like masks have
    millions, 6x the memory of their bits, and finding them was most of the postprocess).
    ``rows`` / ``cols``: ``(lo, hi, 1 - f, f)`` of each output row / column
    (``postprocess.axis_weights``)."""
    logits = [np.ascontiguousarray(low, dtype=np.float32) for low in logits]
    cut = np.float32(cut)
    rows = _weights(rows)
    cols = _weights(cols)
    found = spread(lambda low: _threshold_bits(low, cut, *rows, *cols, size), logits)
    n = len(found)
    boxes = np.array([f[1] for f in found], dtype=np.int64).reshape(n, 4)
    areas = np.array([f[2] for f in found], dtype=np.int64)
    k = np.array([f[3] for f in found], dtype=np.int64)
    last_on = np.array([f[4] for f in found], dtype=bool)
    sizes = np.array([f[0].size for f in found], dtype=np.int64)
    store = np.concatenate([np.zeros(0, np.uint64), *(f[0] for f in found)])
    packed = PackedMasks(boxes, size, areas, k, store=store, at=np.cumsum(sizes) - sizes)
    return packed, k, last_on


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


def _pack_rows_numpy(starts, ends, y0, y1, w, word0, words, out):
    """`_pack_rows` in numpy (where the kernels are off): the same bits in the same words."""
    rows = y1 - y0
    if rows <= 0 or words <= 0:
        return
    lo, n = y0 * w, rows * w
    edges = np.zeros(n + 1, dtype=np.int32)
    np.add.at(edges, np.clip(np.asarray(starts, np.int64) - lo, 0, n), 1)
    np.add.at(edges, np.clip(np.asarray(ends, np.int64) - lo, 0, n), -1)
    pixels = (
        np.cumsum(edges[:-1]).astype(bool).reshape(rows, w)[:, word0 * 64 : (word0 + words) * 64]
    )
    frame = np.zeros((rows, words * 64), dtype=bool)
    frame[:, : pixels.shape[1]] = pixels
    # little bit order: pixel x in bit x % 8 of byte x // 8, so bit x % 64 of a little-endian word
    out |= np.packbits(frame, axis=1, bitorder="little").view("<u8").reshape(-1)


def _and_counts_numpy(store, at, rows, word0, words, a, b, y0, y1, x0, x1, out):
    """`_and_counts` in numpy (where the kernels are off)."""

    def block(i: int, p: int, k0: int, k1: int) -> np.ndarray:
        first = at[i] + (y0[p] - rows[i]) * words[i]
        part = store[first : first + (y1[p] - y0[p]) * words[i]].reshape(-1, words[i])
        return part[:, k0 - word0[i] : k1 - word0[i]]

    for p in range(a.size):
        if y1[p] <= y0[p] or x1[p] <= x0[p]:
            continue
        k0, k1 = x0[p] >> 6, (x1[p] + 63) >> 6
        both = block(a[p], p, k0, k1) & block(b[p], p, k0, k1)
        out[p] = int(np.count_nonzero(np.unpackbits(both.view(np.uint8))))


@_jit
def _intervals_from_bits(store, at, y0, y1, word0, words, w, starts, ends):
    """One packed mask's foreground intervals (positions within the mask) into ``starts`` /
    ``ends``; returns how many."""
    n = 0
    end_col = (word0 + words) * 64
    for y in range(y0, y1):
        row = at + (y - y0) * words
        base = y * w + word0 * 64
        inside = False
        carry = ZERO
        for q in range(words):
            word = store[row + q]
            change = word ^ ((word << ONE) | carry)
            carry = word >> np.uint64(63)
            while change:
                position = base + q * 64 + _low_bit(change)
                if inside:
                    ends[n] = position
                    n += 1
                elif n and ends[n - 1] == position:
                    n -= 1  # a run going on from the end of the row above: joined
                elif n == starts.size:
                    return -1  # more than the count said: never from this module's bits
                else:
                    starts[n] = position
                inside = not inside
                change &= change - ONE
        if inside:  # the row's last word ends in foreground (its last column is the frame's)
            ends[n] = y * w + end_col
            n += 1
    return n


class PackedMasks:
    """The masks of a batch as bits: each mask's rows within its box, 64 pixels a word on the
    frame's grid of 64 columns (pixel x in bit ``x % 64`` of word ``x // 64``), in one store.

    Made two ways: by :func:`threshold_bits`, every mask packed as it is thresholded (then
    ``k``, each mask's number of foreground intervals, is known, and the intervals are made
    from the bits when asked: :meth:`spans`, :meth:`intervals_of`); or empty, for dedup, each
    mask packed from its intervals when first needed (:meth:`pack`). Either way, exact
    intersection counts of fragmented masks (:meth:`and_counts`). This class owns the layout:
    :meth:`pack` and :meth:`and_counts` run numpy code for the same bits where the kernels are
    off, and nothing outside it reads the words."""

    def __init__(self, boxes: np.ndarray, w: int, areas=None, k=None, store=None, at=None):
        """Nothing packed yet; or, with ``store`` and ``at`` (where each mask's words begin),
        every mask packed already."""
        self.boxes = np.asarray(boxes, dtype=np.int64)
        self.w = int(w)
        self.rows = np.ascontiguousarray(self.boxes[:, 1])
        self.word0 = np.ascontiguousarray(self.boxes[:, 0] >> 6)
        self.words = np.maximum(((self.boxes[:, 2] + 63) >> 6) - self.word0, 0)
        if store is None:
            self.at = np.full(len(self.boxes), -1, dtype=np.int64)
            self.store = np.zeros(0, dtype=np.uint64)
        else:
            self.at = np.ascontiguousarray(at, dtype=np.int64)
            self.store = store
        self.used = self.store.size
        self.areas = areas
        self.k = k
        # positions within one mask fit 32 bits at any real frame: half the memory
        self.positions = np.int32 if self.w * self.w < 2**31 else np.int64

    @property
    def nbytes(self) -> int:
        held = (self.boxes, self.rows, self.word0, self.words, self.at, self.store, self.k)
        return sum(int(a.nbytes) for a in held if a is not None)

    def take(self, idx: np.ndarray) -> PackedMasks:
        """The masks at ``idx`` (every mask packed), sharing this store."""
        part = lambda v: None if v is None else v[idx]  # noqa: E731
        return PackedMasks(
            self.boxes[idx], self.w, part(self.areas), part(self.k), self.store, self.at[idx]
        )

    @staticmethod
    def concat(parts: list[PackedMasks]) -> PackedMasks:
        """Batches of packed masks (every mask packed) of one frame width, in order, in one
        new store."""
        joined = lambda vs: None if any(v is None for v in vs) else np.concatenate(vs)  # noqa: E731
        first = np.cumsum([0] + [p.used for p in parts])
        return PackedMasks(
            np.concatenate([p.boxes for p in parts]),
            parts[0].w,
            joined([p.areas for p in parts]),
            joined([p.k for p in parts]),
            np.concatenate([np.zeros(0, np.uint64), *(p.store[: p.used] for p in parts)]),
            np.concatenate([p.at + first[i] for i, p in enumerate(parts)]),
        )

    def spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every mask's foreground intervals from its bits, as ``RleMasks`` holds them:
        ``(offsets, starts, ends)``, positions within each mask (int32 where they fit)."""
        offsets = np.concatenate([[0], np.cumsum(self.k)]).astype(np.int64)
        starts = np.empty(int(offsets[-1]), dtype=self.positions)
        ends = np.empty(int(offsets[-1]), dtype=self.positions)

        def one(i: int) -> None:
            lo, hi = offsets[i], offsets[i + 1]
            self._intervals(i, starts[lo:hi], ends[lo:hi])

        spread(one, [i for i in range(len(self.k)) if self.k[i]])
        return offsets, starts, ends

    def intervals_of(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Mask ``i``'s foreground intervals from its bits: ``(starts, ends)``."""
        starts = np.empty(int(self.k[i]), dtype=self.positions)
        ends = np.empty(int(self.k[i]), dtype=self.positions)
        if starts.size:
            self._intervals(i, starts, ends)
        return starts, ends

    def _intervals(self, i: int, starts: np.ndarray, ends: np.ndarray) -> None:
        x0, y0, x1, y1 = (int(v) for v in self.boxes[i])
        found = _intervals_from_bits(
            self.store,
            int(self.at[i]),
            y0,
            y1,
            int(self.word0[i]),
            int(self.words[i]),
            self.w,
            starts,
            ends,
        )
        if found != starts.size:  # the bits and their count disagree: never from this module
            raise AssertionError(f"mask {i}: {found} intervals in its bits, {starts.size} expected")

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

        pack_rows = _pack_rows if ENABLED else _pack_rows_numpy

        def one(i: int) -> None:
            x0, y0, x1, y1 = (int(v) for v in self.boxes[i])
            lo, hi = offsets[i], offsets[i + 1]
            at, size = int(self.at[i]), (y1 - y0) * int(self.words[i])
            part = self.store[at : at + size]
            pack_rows(starts[lo:hi], ends[lo:hi], y0, y1, self.w, x0 >> 6, int(self.words[i]), part)

        spread(one, todo.tolist())

    def and_counts(self, a, b, y0, y1, x0, x1) -> np.ndarray:
        """``|A & B|`` of packed masks ``a[p]``, ``b[p]``, counted where both boxes meet (rows
        ``y0:y1``, pixel columns ``x0:x1``; whole words around them, as both masks are empty
        outside their boxes)."""
        args = [np.ascontiguousarray(v, dtype=np.int64) for v in (a, b, y0, y1, x0, x1)]
        out = np.zeros(args[0].size, dtype=np.int64)
        step = max(1, -(-out.size // workers()))
        fixed = (self.store, self.at, self.rows, self.word0, self.words)
        and_counts = _and_counts if ENABLED else _and_counts_numpy

        def one(lo: int) -> None:
            and_counts(*fixed, *(v[lo : lo + step] for v in args), out[lo : lo + step])

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

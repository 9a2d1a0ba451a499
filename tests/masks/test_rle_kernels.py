"""The compiled mask kernels give exactly what the numpy reference gives: the same runs,
intervals, boxes and areas from low-res logits, the same kept indices from dedup; and where
numba does not import, the numpy code runs."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from napari_sam3.masks import rle_kernels
from napari_sam3.masks.dedup import _Overlap, dedup_masks
from napari_sam3.masks.rle import RleMasks
from napari_sam3.runtime.postprocess import (
    postprocess_masks,
    threshold_boxes,
    threshold_masks,
    upsample_logits,
)

from ..runtime.test_postprocess_crops import blobs


def test_numba_is_installed_here():
    # a declared dependency: both paths below run on every host of the suite
    assert rle_kernels.AVAILABLE and rle_kernels.ENABLED


def both(fn):
    """``fn()`` on the numpy reference, then on the compiled kernels."""
    saved = rle_kernels.ENABLED
    try:
        rle_kernels.ENABLED = False
        reference = fn()
        rle_kernels.ENABLED = True
        return reference, fn()
    finally:
        rle_kernels.ENABLED = saved


def assert_same(a: RleMasks, b: RleMasks) -> None:
    assert a.shape == b.shape and len(a) == len(b)
    assert np.array_equal(a.counts, b.counts)
    assert np.array_equal(a.runs, b.runs)
    for x, y in zip(a.intervals(), b.intervals(), strict=True):
        assert np.array_equal(x, y)
    assert np.array_equal(a.bboxes, b.bboxes)
    assert np.array_equal(a.areas, b.areas)


def noise(n: int, m: int, seed: int) -> np.ndarray:
    """What random weights give: white-noise logits."""
    return np.random.default_rng(seed).normal(0, 1, (n, m, m)).astype(np.float32)


def smooth(n: int, m: int, seed: int) -> np.ndarray:
    """The postprocess tests' discs and edge cases (empty, full, border-only, one pixel), plus
    one touching the last column (runs going on from one row to the next) and one in a corner."""
    out = blobs(n, m, seed)
    yy, xx = np.mgrid[0:m, 0:m]
    out[4] = np.where((xx == 0) | (xx == m - 1), 3.0, -3.0)
    out[5] = np.where((xx > m - 3) & (yy > m - 3), 3.0, -3.0)
    return out


def plateaus(n: int, m: int, values: list[float], seed: int) -> np.ndarray:
    """Blocks of 4 x 4 low-res pixels, each holding one of ``values``."""
    rng = np.random.default_rng(seed)
    blocks = rng.choice(np.array(values, np.float32), (n, m // 4, m // 4))
    return blocks.repeat(4, axis=1).repeat(4, axis=2)


CASES = [
    ("noise 288 -> 1008", noise(6, 288, 1), 1008, 0.0),
    ("noise, high cut", noise(4, 288, 2), 1008, 1.5),
    ("noise 64 -> 250", noise(5, 64, 3), 250, -0.3),
    ("noise 5 -> 37", noise(5, 5, 4), 37, 0.2),
    ("downsampling 16 -> 8", noise(5, 16, 5), 8, 0.0),
    ("smooth 32 -> 112", smooth(10, 32, 6), 112, 0.0),
    ("smooth 288 -> 1008", smooth(8, 288, 7), 1008, 0.4),
    ("tiny mask_thr", smooth(8, 32, 8), 100, float(np.log(1e-6) - np.log1p(-1e-6))),
    ("huge mask_thr", noise(4, 32, 9) * 20, 100, float(np.log(1 - 1e-6) - np.log1p(-(1 - 1e-6)))),
    # a plateau at the cut: whether c * (1 - f) + c * f > c depends on float32 rounding alone
    ("plateau at the cut", np.full((2, 16, 16), 0.3, np.float32), 100, 0.3),
    ("plateaus", plateaus(3, 32, [-0.2, 0.7, -1.3], 10), 111, -0.2),
    ("all empty", np.full((3, 16, 16), -1.0, np.float32), 64, 0.0),
    ("all full", np.full((3, 16, 16), 1.0, np.float32), 64, 0.0),
    ("no masks", np.zeros((0, 16, 16), np.float32), 64, 0.0),
]


def test_masks_picked_by_order_are_read_in_place_and_equal_those_of_a_copy():
    """The postprocess passes the score order instead of copying the picked logits."""
    logits = np.concatenate([noise(5, 64, 21), smooth(6, 64, 22)])
    order = np.array([7, 0, 10, 3, 3, 9], dtype=np.int64)
    for copied, picked in zip(
        both(lambda: threshold_masks(logits[order], 250, np.float32(0.1))),
        both(lambda: threshold_masks(logits, 250, np.float32(0.1), order)),
        strict=True,
    ):
        assert_same(copied, picked)
    assert len(threshold_masks(logits, 250, np.float32(0.1), order[:0])) == 0


@pytest.mark.parametrize(
    ("logits", "size", "cut"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_threshold_kernel_matches_the_reference(logits, size, cut):
    cut = np.float32(cut)
    reference, compiled = both(lambda: threshold_masks(logits, size, cut))
    assert_same(reference, compiled)
    # and both are the dense upsampling, thresholded; except where a plateau sits exactly at
    # the cut: rounding lifts some of its upsampled values above it, where the reference (like
    # the kernel) looks only near low-res pixels above the cut
    plateau = np.isin(logits, cut).any()
    if len(logits) and size <= 250 and not plateau:
        assert np.array_equal(compiled.to_dense(), upsample_logits(logits, size) > cut)


@pytest.mark.parametrize(
    ("logits", "size", "cut"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_boxes_found_without_the_masks_are_the_masks_boxes(logits, size, cut):
    """An interactive prompt's other candidates get their boxes before (or without) their
    masks: the box kernel must give the boxes of the masks the threshold kernel makes."""
    cut = np.float32(cut)
    masks = threshold_masks(logits, size, cut)
    reference, compiled = both(lambda: threshold_boxes(logits, size, cut))
    assert reference.dtype == compiled.dtype == np.int64
    assert np.array_equal(reference, masks.bboxes)
    assert np.array_equal(compiled, masks.bboxes)


def test_postprocess_matches_the_reference_end_to_end():
    rng = np.random.default_rng(11)
    n = 40
    pred_masks = rng.normal(0, 1, (1, n, 72, 72)).astype(np.float32)
    pred_masks[0, :5] -= 5.0  # some candidates with empty masks
    logits = rng.normal(0, 2, (1, n)).astype(np.float32)
    boxes = rng.uniform(0, 1, (1, n, 4)).astype(np.float32)
    presence = np.array([[1.0]], np.float32)
    for options in ({"score_thr": 0.0}, {"score_thr": 0.3, "mask_thr": 0.7, "max_det": 9}):
        reference, compiled = both(
            lambda options=options: postprocess_masks(
                logits, boxes, pred_masks, presence, 252, **options
            )
        )
        assert np.array_equal(reference[0], compiled[0])
        assert np.array_equal(reference[1], compiled[1])
        assert_same(reference[2], compiled[2])
        assert reference[2].to_bytes() == compiled[2].to_bytes()


HELD_AS_BITS = [
    "noise 288 -> 1008",
    "noise 64 -> 250",
    "noise 5 -> 37",
    "smooth 32 -> 112",
    "smooth 288 -> 1008",
    "plateaus",
    "all empty",
    "all full",
]


@pytest.mark.parametrize("case", HELD_AS_BITS)
def test_a_batch_held_as_bits_answers_as_the_reference(case):
    """The compiled postprocess holds each mask's bits, no intervals: each way of reading them
    (a mask alone, taken, joined, pickled, deduplicated) gives what the reference's gives."""
    _, logits, size, cut = next(c for c in CASES if c[0] == case)
    cut = np.float32(cut)
    reference, _ = both(lambda: threshold_masks(logits, size, cut))
    fresh = lambda: threshold_masks(logits, size, cut)  # noqa: E731 (compiled: the default)
    batch = fresh()
    assert batch._bits is not None and batch._spans is None
    for i in range(len(batch)):
        one, expected = batch.mask(i), reference.mask(i)
        assert one == expected and (one.area, one.bbox) == (expected.area, expected.bbox)
    assert batch._spans is None  # a mask's intervals come from its own bits
    rng = np.random.default_rng(len(batch))
    scattered = rng.permutation(len(batch))[: max(1, len(batch) - 2)]
    for idx in (scattered, np.arange(1, len(batch))):
        assert_same(reference.take(idx), fresh().take(idx))
    shape = reference.shape
    joined = RleMasks.concat([fresh(), fresh().take(scattered)], shape)
    assert joined._bits is not None and joined._spans is None
    assert_same(RleMasks.concat([reference, reference.take(scattered)], shape), joined)
    assert_same(reference, pickle.loads(pickle.dumps(fresh())))
    scores = rng.random(len(batch))
    for threshold in (0.3, 0.85):
        held = fresh()
        by_runs = RleMasks._from_runs(reference.runs, reference.counts, shape)
        kept = dedup_masks(held, scores, threshold)
        assert np.array_equal(kept, dedup_masks(by_runs, scores, threshold))
        assert held._spans is None  # counted on the bits
    dense = reference.to_dense().reshape(len(batch), -1)
    a, b = (v.ravel() for v in np.meshgrid(np.arange(len(batch)), np.arange(len(batch))))
    counts = _Overlap(fresh(), 0.5).intersections(a, b)
    assert np.array_equal(counts, (dense[a] & dense[b]).sum(axis=1))
    held = fresh()
    bits = held.nbytes
    assert held.runs.size and held.nbytes > bits  # the runs, once made, are held too


def near_duplicates(n: int, m: int, size: int, spread: float, seed: int) -> RleMasks:
    """Noise-like masks that copy one another in part, as random weights give."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 1, (1, m, m)).astype(np.float32)
    logits = base + rng.normal(0, spread, (n, m, m)).astype(np.float32)
    return threshold_masks(logits, size, np.float32(0))


def fragmented_in_boxes(n: int, size: int, seed: int) -> RleMasks:
    """Fields and clouds: noisy masks inside boxes of many sizes, some at the frame's edges."""
    rng = np.random.default_rng(seed)
    crops = []
    for i in range(n):
        h, w = rng.integers(size // 8, size, 2)
        r, c = (
            (0, size - w) if i % 4 == 0 else (rng.integers(0, size - h), rng.integers(0, size - w))
        )
        crops.append((int(r), int(c), rng.random((h, w)) < rng.uniform(0.2, 0.8)))
    return RleMasks.from_crops(crops, (size, size))


BATCHES = {
    "independent noise": lambda: threshold_masks(noise(24, 72, 1), 250, np.float32(0)),
    "near duplicates": lambda: near_duplicates(30, 72, 250, 0.3, 2),
    "loose duplicates": lambda: near_duplicates(30, 72, 250, 1.0, 3),
    "fragmented in boxes": lambda: fragmented_in_boxes(40, 300, 4),
    "smooth with edge cases": lambda: threshold_masks(smooth(12, 32, 5), 112, np.float32(0)),
}


@pytest.mark.parametrize("threshold", [0.3, 0.55, 0.85, 1.0])
@pytest.mark.parametrize("batch", list(BATCHES))
def test_dedup_kernels_keep_the_same_masks(batch, threshold):
    masks = BATCHES[batch]()
    scores = np.random.default_rng(len(masks)).random(len(masks))

    def kept():
        fresh = RleMasks._from_runs(masks.runs, masks.counts, masks.shape)  # nothing remembered
        return dedup_masks(fresh, scores, threshold)

    reference, compiled = both(kept)
    assert np.array_equal(reference, compiled)
    if batch == "near duplicates" and threshold <= 0.55:
        assert 0 < reference.size < len(masks)  # a case where masks are dropped and kept


def test_dedup_kernels_with_groups_and_exempt_masks():
    masks = near_duplicates(24, 72, 250, 0.6, 6)
    rng = np.random.default_rng(7)
    scores = rng.random(len(masks))
    groups, exempt = rng.integers(0, 3, len(masks)), rng.integers(-1, 4, len(masks))
    reference, compiled = both(
        lambda: dedup_masks(masks, scores, 0.5, groups=groups, exempt=exempt)
    )
    assert np.array_equal(reference, compiled)


def test_packed_counts_are_exact_intersections():
    masks = fragmented_in_boxes(12, 200, 8)
    dense = masks.to_dense()
    owner, start, end = masks.intervals()
    offsets = np.searchsorted(owner, np.arange(len(masks) + 1))
    packed = rle_kernels.PackedMasks(masks.bboxes, 200)
    a, b = np.triu_indices(len(masks), k=1)
    packed.pack(np.concatenate([a, b]), start, end, offsets)
    boxes = masks.bboxes
    counts = packed.and_counts(
        a,
        b,
        np.maximum(boxes[a, 1], boxes[b, 1]),
        np.minimum(boxes[a, 3], boxes[b, 3]),
        np.maximum(boxes[a, 0], boxes[b, 0]),
        np.minimum(boxes[a, 2], boxes[b, 2]),
    )
    expected = [(dense[i] & dense[j]).sum() for i, j in zip(a, b, strict=True)]
    assert counts.tolist() == expected


def test_rows_lookup_matches_the_reference():
    from napari_sam3.masks.dedup import _Overlap

    masks = fragmented_in_boxes(20, 150, 9)
    overlap = _Overlap(masks, 0.5)
    rng = np.random.default_rng(10)
    which = rng.integers(0, len(masks), 200)
    y0 = rng.integers(0, 150, 200)
    y1 = np.minimum(y0 + rng.integers(-5, 60, 200), 150)  # rows of the frame, as boxes give
    reference, compiled = both(lambda: overlap._in_rows(which, y0, y1))
    assert np.array_equal(reference[0], compiled[0])
    assert np.array_equal(reference[1], compiled[1])
    assert reference[1].max() > 0


def test_without_numba_the_numpy_code_runs(tmp_path):
    # numba made unimportable: the module says so and the postprocess still answers
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import numpy as np\n"
        "from napari_sam3.masks import rle_kernels\n"
        "from napari_sam3.runtime.postprocess import threshold_masks\n"
        "assert not rle_kernels.AVAILABLE and not rle_kernels.ENABLED\n"
        "low = np.random.default_rng(0).normal(0, 1, (3, 16, 16)).astype(np.float32)\n"
        "print(threshold_masks(low, 40, np.float32(0)).runs.sum())\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert int(out.stdout) == 3 * 40 * 40


def test_the_kernels_cache_goes_where_numba_cache_dir_says(tmp_path):
    code = (
        "import numpy as np\n"
        "from napari_sam3.runtime.postprocess import threshold_masks\n"
        "threshold_masks(np.ones((1, 4, 4), np.float32), 8, np.float32(0))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert any(p.name.startswith("rle_kernels") for p in (tmp_path / "cache").rglob("*.nbi"))


def test_a_forked_child_spreads_work_on_its_own_threads():
    import multiprocessing

    rle_kernels.spread(abs, [-1, -2, -3])  # the parent's pool exists
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        result = pool.apply_async(rle_kernels.spread, (abs, [-4, -5, -6]))
        assert result.get(timeout=60) == [4, 5, 6]


@pytest.fixture
def eight_cpus(monkeypatch):
    """A process allowed 8 CPUs, whatever this host has; the thread limit restored after."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    yield
    rle_kernels.set_threads(0)


def threads_used(items: int, at_once: int) -> set[int]:
    """The threads that ran `items` tasks, each of which waits until `at_once` tasks run: the
    pool must run that many at once (else the barrier breaks), and starts a thread per task
    while all of its threads wait."""
    import threading

    together = threading.Barrier(at_once, timeout=60)

    def one(_):
        together.wait()
        return threading.get_ident()

    return set(rle_kernels.spread(one, list(range(items))))


def test_the_mask_kernels_use_at_most_the_threads_asked_for(eight_cpus):
    import threading

    assert rle_kernels.workers() == 8
    assert len(threads_used(6, at_once=6)) == 6  # no limit: one thread per task, up to the CPUs
    rle_kernels.set_threads(2)
    assert rle_kernels.workers() == 2
    assert len(threads_used(6, at_once=2)) == 2
    rle_kernels.set_threads(1)
    assert threads_used(6, at_once=1) == {threading.get_ident()}  # one thread: the caller's
    rle_kernels.set_threads(32)
    assert rle_kernels.workers() == 8  # never more than the CPUs the process may use
    rle_kernels.set_threads(0)
    assert rle_kernels.workers() == 8
    with pytest.raises(ValueError, match="threads must be >= 0"):
        rle_kernels.set_threads(-1)


def test_an_embedded_client_sets_the_mask_threads(eight_cpus, tiny_repository):
    from napari_sam3 import Sam3Client

    Sam3Client.local(tiny_repository, threads=3, precision="fp32")
    assert rle_kernels.workers() == 3
    Sam3Client.local(tiny_repository, precision="fp32")  # threads 0: every CPU
    assert rle_kernels.workers() == 8

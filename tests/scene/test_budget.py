"""A scene run's memory budget (scene/budget.py): what it parses, how it plans, and that a run
keeps to it: the tiles in flight and the queries per request, with the detections unchanged."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from napari_sam3.core.errors import InvalidInput
from napari_sam3.scene import segment_scene
from napari_sam3.scene.budget import (
    DEFAULT_BUDGET_CAP,
    MIN_BUDGET,
    WORK_PER_MASK_BYTE,
    ScenePlan,
    default_budget,
    resolve_budget,
)

GIB = 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.5GB", 1_500_000_000), ("2GiB", 2 * GIB), ("800MB", 800_000_000), (3 * GIB, 3 * GIB)],
)
def test_sizes_are_read_with_their_units(text, expected):
    assert resolve_budget(text) == expected


@pytest.mark.parametrize("bad", ["lots", "1.5 parsecs", "", True, -5, 1000, "64MB", float("nan")])
def test_a_budget_that_is_no_size_or_too_small_is_refused_with_what_to_give(bad):
    with pytest.raises(InvalidInput, match="1.5GB"):
        resolve_budget(bad)


def test_the_default_is_a_quarter_of_what_is_available_within_its_bounds():
    # both sides of the cap, and the floor, from psutil-shaped figures
    assert default_budget(available=4 * GIB) == GIB
    assert default_budget(available=64 * GIB) == DEFAULT_BUDGET_CAP
    assert default_budget(available=100 * 2**20) == MIN_BUDGET
    assert MIN_BUDGET <= resolve_budget(None) == resolve_budget("auto") <= DEFAULT_BUDGET_CAP


def _plan(budget, **kw):
    base = dict(
        features=140 * 2**20, query=66 * 2**20, tile=12 * 2**20, queries=4, per_request=4,
        requested=4,
    )  # fmt: skip
    return ScenePlan(budget=budget, **{**base, **kw})


def test_the_plan_measures_one_query_first_then_fills_the_budget():
    plan = _plan(3 * GIB)
    assert plan.request_size() == plan.in_flight() == 1  # nothing measured yet
    plan.observe([10 * 2**20], held_added=0)
    # 140 + 12 MB beside 4 queries of 66 + 5 x 10 MB: all four fit; tiles: 3 GiB / 616 MB = 4
    assert plan.request_size() == 4
    assert plan.in_flight() == 4
    plan.observe([300 * 2**20], held_added=0)  # fragmented masks: 66 + 1500 MB a query
    assert plan.request_size() == 1 and plan.in_flight() == 1
    assert plan.report()["masks_per_query"] == 300 * 2**20


def test_detections_held_shrink_what_runs_beside_them_but_never_below_one():
    plan = _plan(2 * GIB)
    plan.observe([20 * 2**20], held_added=0)
    before = plan.in_flight(), plan.request_size()
    plan.observe([], held_added=GIB)
    after = plan.in_flight(), plan.request_size()
    assert after < before
    plan.observe([], held_added=4 * GIB)  # beyond the budget: slowest, never stopped
    assert (plan.in_flight(), plan.request_size()) == (1, 1)
    assert plan.report()["detections_held"] == 5 * GIB


def test_the_feature_cache_gets_what_the_work_leaves_of_the_budget():
    mib = 2**20
    plan = _plan(2 * GIB, cache=552 * mib)
    assert plan.feature_cache() == 552 * mib  # the first tile: its own bound, as room allows
    plan.observe([300 * mib], held_added=0)  # one query's work: 66 + 5 x 300 MiB
    assert plan.feature_cache() == 2048 * mib - (12 + 66 + 1500) * mib  # 470 MiB of room
    plan.observe([], held_added=GIB)  # the objects held take the rest: the running tile only
    assert plan.feature_cache() == 140 * mib
    assert _plan(GIB, cache=552 * mib, features=0).feature_cache() == 0  # a server's own


class _CountingStub:
    """The scene conftest's stub, answering like Sam3Client (`mask_bytes`: the runs of every
    mask answered); it counts what runs at once. With `wait_for_company`, a request of several
    queries (made only once a tile was measured) waits until two requests run together: a plan
    that never overlaps the tiles breaks the wait instead of passing by chance."""

    def __init__(self, base, mask_bytes: int, wait_for_company: bool = False) -> None:
        self.base, self.mask_bytes = base, mask_bytes
        self.image_size, self.model_id = base.image_size, base.model_id
        self.manifest, self.engine = base.manifest, base.engine
        self.lock = threading.Lock()
        self.running = self.most_running = 0
        self.sizes: list[int] = []
        self.wait_for_company = wait_for_company
        self.together = threading.Event()

    def prepare(self, rgb):
        return rgb

    def cache_limits(self, *args, **kwargs):
        return self.base.cache_limits(*args, **kwargs)

    def multi(self, image, keywords, concepts=(), **options) -> pd.DataFrame:
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.sizes.append(len(keywords))
            if self.running > 1:
                self.together.set()
        try:
            if self.wait_for_company and len(keywords) > 1:
                if not self.together.wait(timeout=60):
                    raise RuntimeError("no two requests ever ran together")
            frame = self.base.multi(image, keywords, **options)
        finally:
            with self.lock:
                self.running -= 1
        frame.attrs["mask_bytes"] = self.mask_bytes * len(keywords)
        return frame


def _scene(geotiff, tmp_path):
    rng = np.random.default_rng(3)
    data = np.zeros((3, 200, 260), np.uint8)
    for _ in range(12):
        r, c = rng.integers(0, 180), rng.integers(0, 240)
        data[0, r : r + 14, c : c + 14] = rng.integers(60, 250)
    return geotiff(tmp_path / "scene.tif", data)


def test_a_run_keeps_the_tiles_in_flight_and_the_queries_per_request_within_its_budget(
    make_stub, geotiff, tmp_path
):
    path = _scene(geotiff, tmp_path)
    keywords = ["a", "b", "c"]
    runs = {}
    for name, budget in (("roomy", 8 * GIB), ("tight", MIN_BUDGET)):
        # each query answers 30 MiB of runs: 150 MiB of work, beyond the tight budget
        stub = _CountingStub(make_stub(), 30 * 2**20, wait_for_company=name == "roomy")
        frame = segment_scene(
            stub, path, keywords=keywords, tile_size=64, overlap=8, in_flight=4,
            memory_budget=budget, progress=False,
        )  # fmt: skip
        runs[name] = (stub, frame)
    roomy, tight = runs["roomy"], runs["tight"]
    assert tight[1].attrs["memory"]["budget"] == MIN_BUDGET
    # the tight budget: one tile at a time, one query a request (three requests a tile)
    assert tight[0].most_running == 1 and tight[1].attrs["timings"]["peak_in_flight"] == 1
    assert set(tight[0].sizes) == {1}
    # the roomy one: after the first (measured) tile, all three queries at once, tiles overlap
    assert tight[1].attrs["memory"]["queries_per_request"] == 1
    assert roomy[1].attrs["memory"]["queries_per_request"] == 3 and 3 in roomy[0].sizes
    assert roomy[0].most_running > 1
    # the detections do not depend on the plan
    columns = ["score", "keyword", "tile", "merged"]
    pd.testing.assert_frame_equal(roomy[1][columns], tight[1][columns])
    np.testing.assert_array_equal(np.stack(roomy[1]["box"]), np.stack(tight[1]["box"]))
    assert WORK_PER_MASK_BYTE * 30 * 2**20 > MIN_BUDGET  # why the tight run is tight


def test_a_real_scene_run_leaves_no_tile_in_the_caches_and_restores_their_bounds(
    local_client, s2_crop, geotiff, tmp_path
):
    client = local_client
    path = geotiff(tmp_path / "s2.tif", np.ascontiguousarray(s2_crop.data))
    client.clear_cache()
    before = client.cache_info()
    frame = segment_scene(
        client, path, keywords=["building", "road"], score_thr=0.0, in_flight=2,
        memory_budget="512MB", progress=False,
    )  # fmt: skip
    after = client.cache_info()
    memory = frame.attrs["memory"]
    assert memory["budget"] == 512_000_000
    assert memory["features_per_tile"] == after["image_bytes"] > 0
    assert memory["masks_per_query"] > 0  # measured from the engine's answers
    # bounds as before; no raw heads or answers kept for tiles; tiles' features as room allows
    for part in ("features", "heads"):
        assert after[part]["max_bytes"] == before[part]["max_bytes"]
    assert after["results"]["max_bytes"] == before["results"]["max_bytes"]
    assert after["heads"]["entries"] == 0 and after["results"]["entries"] == 0
    tiles = len(frame.attrs["tiles_run"])
    assert memory["feature_cache"] >= tiles * after["image_bytes"]  # tiny: all of them fit
    assert after["features"]["entries"] == tiles  # so a run again encodes none
    assert len(frame) >= 1


def test_objects_held_beyond_the_budget_are_all_kept_and_the_run_says_so(
    make_stub, geotiff, tmp_path, monkeypatch
):
    import warnings

    from napari_sam3.scene import budget

    monkeypatch.setattr(budget, "MIN_BUDGET", 1)  # a budget a test's few objects can exceed
    path = _scene(geotiff, tmp_path)
    # the scene is objects on 0: image here, not fill
    options = dict(prompt="a", tile_size=64, overlap=8, progress=False, nodata="none")
    with pytest.warns(UserWarning, match="more than the memory budget .* all kept"):
        tight = segment_scene(make_stub(full_tile=True), path, memory_budget=64, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        roomy = segment_scene(make_stub(full_tile=True), path, memory_budget=GIB, **options)
    assert tight.attrs["memory"]["detections_held"] > 64
    assert len(tight) == len(roomy) > 0

"""segment_scene's bounded pipeline: N requests in flight give the serial run's detections."""

from __future__ import annotations

import contextlib
import threading
import types

import numpy as np
import pandas as pd
import pytest

from napari_sam3.scene import default_in_flight, scene_geodataframe, scene_labels, segment_scene
from napari_sam3.scene.run import _READ_AHEAD

OPTIONS = dict(keywords=["building", "road"], tile_size=256, overlap=32, score_thr=0.0)


def test_four_in_flight_give_the_serial_detections(local_client, s2_rgb_paths):
    serial = segment_scene(local_client, s2_rgb_paths, in_flight=1, progress=False, **OPTIONS)
    done = []
    parallel = segment_scene(
        local_client, s2_rgb_paths, in_flight=4, progress=lambda d, t: done.append(d), **OPTIONS
    )
    assert len(serial) > 10 and len(serial.attrs["tiles"]) == 28
    assert serial.attrs["timings"]["peak_in_flight"] == 1
    assert parallel.attrs["timings"]["peak_in_flight"] <= 4  # exact concurrency: the stub test
    assert done == list(range(1, 29))  # progress in tile order, every tile once
    a, b = scene_geodataframe(serial), scene_geodataframe(parallel)
    pd.testing.assert_frame_equal(a.drop(columns="geometry"), b.drop(columns="geometry"))
    assert a.geometry.geom_equals_exact(b.geometry, tolerance=0).all()
    np.testing.assert_array_equal(scene_labels(serial), scene_labels(parallel))


class _Gated:
    """A stub client whose tiles are objects counted while alive. A scene runs its first tile
    alone (measured, see budget.py); the requests after it wait until `at_once` of them run
    together (a pipeline that never runs that many breaks the wait), then all pass."""

    image_size = 32
    model_id = "stub"
    manifest = types.SimpleNamespace(max_keywords=4)
    engine = types.SimpleNamespace(concurrency=lambda: 1, local=False)  # what scenes read

    def __init__(self, at_once: int) -> None:
        self.at_once = at_once
        self.lock = threading.Lock()
        self.together = threading.Event()
        self.alive = self.peak_alive = self.running = self.peak_running = self.calls = 0

    def prepare(self, rgb):
        client = self

        class Tile:
            def __init__(self) -> None:
                with client.lock:
                    client.alive += 1
                    client.peak_alive = max(client.peak_alive, client.alive)

            def __del__(self) -> None:
                with client.lock:
                    client.alive -= 1

        return Tile()

    def cache_limits(self, *_bounds, **_named) -> contextlib.nullcontext:
        return contextlib.nullcontext()  # a stub holds no cache

    def segment(self, prepared, prompt, **options):
        from napari_sam3.client.results import empty_result

        with self.lock:
            self.calls += 1
            first = self.calls == 1
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            if self.running >= self.at_once:
                self.together.set()
        try:
            if not first and not self.together.wait(timeout=60):
                raise RuntimeError(f"{self.at_once} requests never ran at once")
        finally:
            with self.lock:
                self.running -= 1
        return empty_result()


@pytest.mark.parametrize("n", [1, 3])
def test_tiles_held_stay_bounded(tmp_path, geotiff, n):
    path = geotiff(tmp_path / "big.tif", np.full((3, 320, 320), 120, np.uint8))
    stub = _Gated(at_once=n)
    frame = segment_scene(stub, path, "x", tile_size=32, overlap=0, in_flight=n, progress=False)
    assert len(frame.attrs["tiles"]) == 100 and len(frame) == 0
    assert stub.peak_running == n and frame.attrs["timings"]["peak_in_flight"] == n
    assert stub.peak_alive <= n + _READ_AHEAD + 1


def test_in_flight_is_checked_and_defaults_to_one_embedded(local_client, tmp_path, geotiff):
    assert default_in_flight(local_client) == 1
    path = geotiff(tmp_path / "s.tif", np.full((3, 64, 64), 120, np.uint8))
    with pytest.raises(ValueError, match="in_flight"):
        segment_scene(local_client, path, "x", in_flight=0, progress=False)

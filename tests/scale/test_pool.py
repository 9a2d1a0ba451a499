"""A pool of real local tritonservers behind one Sam3Client: spread, loss mid-scene, rejoin."""

from __future__ import annotations

import os
import signal
import warnings

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.scene import default_in_flight, segment_scene
from napari_sam3.serving.ports import free_port
from napari_sam3.serving.server import TritonServer

pytestmark = pytest.mark.needs_tritonserver

OPTIONS = dict(prompt="building", tile_size=256, overlap=32, score_thr=0.0)


@pytest.fixture(scope="module")
def servers(tiny_repository, tmp_path_factory):
    logs = tmp_path_factory.mktemp("pool")
    a = TritonServer(tiny_repository, log_file=logs / "a.log").start()
    b = TritonServer(tiny_repository, log_file=logs / "b.log").start()
    box = {"a": a, "b": b}
    yield box
    for server in box.values():
        server.stop()


@pytest.fixture(scope="module")
def reference(servers, s2_rgb_paths):
    with Sam3Client(servers["a"].grpc_address) as one:
        return segment_scene(one, s2_rgb_paths, in_flight=1, progress=False, **OPTIONS)


def assert_same(got, ref):
    assert len(ref) > 10 and len(got) == len(ref)
    np.testing.assert_array_equal(got["score"].to_numpy(), ref["score"].to_numpy())
    np.testing.assert_array_equal(np.stack(got["box"]), np.stack(ref["box"]))
    for mine, theirs in zip(got["mask"], ref["mask"], strict=True):
        assert mine.bbox == theirs.bbox and mine.area == theirs.area


def test_a_pool_spreads_the_tiles(servers, s2_rgb_paths, reference):
    address = f"{servers['a'].grpc_address},{servers['b'].grpc_address}"
    with Sam3Client(address) as pool:
        assert default_in_flight(pool) == 4  # 2 servers x (1 encoder instance + 1 queued)
        got = segment_scene(pool, s2_rgb_paths, progress=False, **OPTIONS)
        members = pool.engine.members()
    assert 1 < got.attrs["timings"]["peak_in_flight"] <= 4
    assert_same(got, reference)
    assert all(m["healthy"] and m["served"] >= 5 for m in members)


def test_a_server_killed_mid_scene_loses_nothing_and_rejoins(servers, s2_rgb_paths, reference):
    b = servers["b"]
    pool = Sam3Client([servers["a"].grpc_address, b.grpc_address])
    pool.engine.probe_interval = 0.5

    def kill(done, total):
        if done == 6:
            os.kill(b.process.pid, signal.SIGKILL)

    with pytest.warns(RuntimeWarning, match=f"{b.grpc_address} is out of the pool") as caught:
        got = segment_scene(pool, s2_rgb_paths, in_flight=4, progress=kill, **OPTIONS)
    assert sum(b.grpc_address in str(w.message) for w in caught) == 1  # warned once
    assert_same(got, reference)
    down = pool.engine.members()[1]
    assert not down["healthy"] and down["failures"] == 1
    before = down["served"]

    b.stop()
    servers["b"] = TritonServer(
        b.repository, grpc_port=b.grpc_port, http_port=b.http_port, log_file=b.log_file
    ).start()
    # the probe's look at b (every 0.5 s) lets it back in
    assert pool.engine.wait_all_healthy(timeout=60), f"never rejoined: {pool.engine.members()}"
    # another prompt: the client's own answer cache would serve a repeat without requests
    segment_scene(pool, s2_rgb_paths, **{**OPTIONS, "prompt": "road"}, progress=False)
    assert pool.engine.members()[1]["served"] > before + 3
    pool.close()


def test_an_unreachable_server_among_several_is_warned_once(servers, s2_rgb_paths, reference):
    dead = f"127.0.0.1:{free_port()}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Sam3Client([servers["a"].grpc_address, dead], connect_timeout=5) as pool:
            got = segment_scene(pool, s2_rgb_paths, in_flight=4, progress=False, **OPTIONS)
    assert [str(w.message) for w in caught if dead in str(w.message)][0].startswith(
        f"Triton at {dead} is out of the pool"
    )
    assert sum(dead in str(w.message) for w in caught) == 1
    assert_same(got, reference)


def test_all_servers_down_is_a_clear_error_after_the_connect_timeout():
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    with pytest.raises(ConnectionError) as info:
        Sam3Client(dead, connect_timeout=0.5)
    message = str(info.value)
    assert message.startswith(
        f"none of the 2 Triton servers is ready ({dead[0]}, {dead[1]}) within 0.5 s: "
    )
    # each server's own wait ran out, refused
    for address in dead:
        assert f"{address}: no ready Triton server at {address} within 0.5 s (" in message
    assert message.count("refused") == 2

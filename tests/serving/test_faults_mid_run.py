"""Servers killed during a scene run (real tritonserver processes, SIGKILL after the first tiles).

A pool that loses a server writes the same polygons as one healthy server; a run that loses its
only server stops with an error naming the server and how many tiles were done, and writes
nothing. (A server restarted on another model mid-scene: tests/client/test_model_change.py.)
"""

from __future__ import annotations

import os
import signal
import warnings

import geopandas as gpd
import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.core.errors import ConnectionFailed
from napari_sam3.prompts.query import Query
from napari_sam3.scene.driver import segment_to_file
from napari_sam3.serving.server import TritonServer

pytestmark = pytest.mark.needs_tritonserver

QUERY = Query.of(keywords=["building", "road"], score_thr=0.0)
KILL_AFTER = 2  # tiles


@pytest.fixture(scope="module")
def healthy(tiny_repository, tmp_path_factory):
    """The server no test kills."""
    logs = tmp_path_factory.mktemp("faults")
    with TritonServer(tiny_repository, log_file=logs / "healthy.log") as server:
        yield server


@pytest.fixture
def victim(tiny_repository, tmp_path):
    """A server a test kills (stopped afterwards: its stubs, shared memory)."""
    server = TritonServer(tiny_repository, log_file=tmp_path / "victim.log").start()
    yield server
    server.stop()


class Killer:
    """The progress callback that SIGKILLs `server` once `after` tiles are through."""

    def __init__(self, server: TritonServer, after: int = KILL_AFTER) -> None:
        self.server, self.after = server, after
        self.total = self.at = None

    def __call__(self, done: int, total: int) -> None:
        self.total = total
        if done == self.after and self.at is None:
            os.kill(self.server.process.pid, signal.SIGKILL)
            self.at = done


@pytest.fixture(scope="module")
def reference(healthy, crop_tif, tmp_path_factory):
    """The polygons of the scene run on one healthy server, as written."""
    out = tmp_path_factory.mktemp("reference") / "healthy.geojson"
    with Sam3Client(healthy.grpc_address) as client:
        segment_to_file(client, crop_tif, out, QUERY)
    return gpd.read_file(out)


def test_a_pool_that_loses_a_server_mid_scene_writes_the_same_polygons(
    healthy, victim, reference, crop_tif, tmp_path
):
    kill = Killer(victim)
    out = tmp_path / "pool.geojson"
    with Sam3Client([healthy.grpc_address, victim.grpc_address]) as pool:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            segment_to_file(pool, crop_tif, out, QUERY, progress=kill)
        members = {m["address"]: m for m in pool.engine.members()}
    assert kill.at == KILL_AFTER < kill.total  # killed mid-run, tiles still to come
    lost = members[victim.grpc_address]
    assert not lost["healthy"] and lost["failures"] == 1 and lost["served"] > 0, lost
    assert any(f"{victim.grpc_address} is out of the pool" in str(w.message) for w in caught)
    got = gpd.read_file(out)
    assert len(reference) > 5 and len(got) == len(reference)
    assert got.geom_equals_exact(reference.geometry, tolerance=0).all()
    for column in ("score", "keyword", "prompt_kind"):
        np.testing.assert_array_equal(got[column].to_numpy(), reference[column].to_numpy())


def test_the_only_server_killed_mid_scene_names_it_and_what_was_done_and_writes_nothing(
    victim, crop_tif, tmp_path
):
    kill = Killer(victim)
    out = tmp_path / "results"
    out.mkdir()
    client = Sam3Client(victim.grpc_address, retries=1)
    with pytest.raises(ConnectionFailed) as error:
        segment_to_file(client, crop_tif, out / "scene.gpkg", QUERY, progress=kill)
    client.close()
    message = str(error.value)
    assert kill.at == KILL_AFTER < kill.total
    assert message.startswith(f"Triton at {victim.grpc_address} ")
    assert message.endswith(
        f"the scene run of {crop_tif.name} stopped after {KILL_AFTER} of {kill.total} tiles, "
        "nothing was written"
    )
    assert error.value.tiles_done == (KILL_AFTER, kill.total)
    assert list(out.iterdir()) == []  # no output, no temporary file

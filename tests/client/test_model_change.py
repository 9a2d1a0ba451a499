"""A client notices a server restarted on another model repository between two of its calls.

One real `tritonserver` (the CPU one of nvidia-pytriton), restarted on the same port on another
repository exported by our own tool (the tiny model with another seed: another model_id) while
ONE client stays connected. Before: a repeated prompt was answered from the client's memo with
the old model's result, and a concept, a handle's refilter or an interactive session of the old
model failed with "image_id ... is not the key of the pixels" (and stayed broken).
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from napari_sam3 import ModelChanged, Sam3Client
from napari_sam3.core import contract
from napari_sam3.serving.server import TritonServer

from .._required import require, require_tritonserver

needs_triton = pytest.mark.needs_tritonserver
BUILDING = {"score_thr": 0.0, "dedup": None}
POSITIVE = [40, 30, 140, 120]


@pytest.fixture(scope="module")
def other_repository(tmp_path_factory):
    """The tiny model with another seed (another model_id), exported by our own tool."""
    require("sam3_export")
    from sam3_export.pipeline import export_all
    from sam3_export.triton_repo import write_repository

    out = tmp_path_factory.mktemp("other_repository")
    manifest = export_all(out, size="tiny", seed=1)
    write_repository(out, manifest, flavor="python", device="cpu", precision="fp32")
    return out


@pytest.fixture(scope="module")
def older_repository(other_repository, tmp_path_factory):
    """`other_repository` as sam3-export wrote it before `cache_model_id` existed: its
    sam3_cached declares (so answers) no such output; its `info` JSON names the model."""
    repo = tmp_path_factory.mktemp("older") / "repository"
    shutil.copytree(other_repository, repo)
    config = repo / contract.CACHED / "config.pbtxt"
    text = config.read_text()
    pattern = r'output \{\s*name: "cache_model_id"[^}]*\}\s*'
    assert len(re.findall(pattern, text)) == 1
    config.write_text(re.sub(pattern, "", text))
    return repo


class Restartable:
    """A real tritonserver on fixed loopback ports that a test restarts on another repository."""

    def __init__(self, repository, logs) -> None:
        self.logs, self.count = logs, 0
        self.server = TritonServer(repository, log_file=logs / "0.log").start()

    @property
    def address(self) -> str:
        return self.server.grpc_address

    @property
    def repository(self):
        return self.server.repository

    def restart(self, repository) -> None:
        old = self.server
        old.stop()
        self.count += 1
        self.server = TritonServer(
            repository,
            grpc_port=old.grpc_port,
            http_port=old.http_port,
            log_file=self.logs / f"{self.count}.log",
        ).start()


@pytest.fixture(scope="module")
def server(tiny_repository, tmp_path_factory):
    require_tritonserver()
    box = Restartable(tiny_repository, tmp_path_factory.mktemp("restarted"))
    yield box
    box.server.stop()


@pytest.fixture
def switch(server, tiny_repository, other_repository):
    """(client on the model served now, restart): `restart()` puts the server on the other
    repository (another model) while the client stays connected; returns (old, new) model ids."""
    client = Sam3Client(server.address, connect_timeout=30)
    client.clear_cache()
    client.engine.infer = sent = _Counted(client.engine.infer)

    def restart(onto=None):
        if onto is None:
            onto = (
                other_repository
                if server.repository == tiny_repository.resolve()
                else tiny_repository
            )
        old = client.model_id
        server.restart(onto)
        sent.counts.clear()  # as the restarted server's own statistics
        new = contract.load_manifest(onto).model_id
        assert new != old
        return old, new

    yield client, restart
    client.close()


class _Counted:
    """An engine's `infer` that counts the requests sent to each model (each is one run on
    the server; Triton's own statistics count a request a moment after answering it)."""

    def __init__(self, infer) -> None:
        self.infer, self.counts = infer, Counter()

    def __call__(self, model_name, *args, **kwargs):
        self.counts[model_name] += 1
        return self.infer(model_name, *args, **kwargs)


def _cached_runs(client) -> int:
    """Requests `client` sent to sam3_cached since the server's restart."""
    return client.engine.infer.counts[contract.CACHED]


def _image(s2_crop):
    return np.asarray(s2_crop.data)


def _same(a, b) -> None:
    """Two results are identical: rows, scores (exactly), boxes and every mask pixel."""
    assert len(a) == len(b) > 0
    np.testing.assert_array_equal(a["score"].to_numpy(), b["score"].to_numpy())
    np.testing.assert_array_equal(np.stack(a["box"]), np.stack(b["box"]))
    for m, n in zip(a["mask"], b["mask"], strict=True):
        assert np.array_equal(np.asarray(m), np.asarray(n))


def _fresh(address, call):
    """What a client that never saw the old model gets from the server now."""
    with Sam3Client(address) as fresh:
        return call(fresh)


def _changes(caught) -> list[str]:
    return [str(w.message) for w in caught if "now serves model" in str(w.message)]


def _assert_warned_once(caught, old, new) -> None:
    said = _changes(caught)
    assert len(said) == 1, said
    assert old[:12] in said[0] and new[:12] in said[0] and "dropped" in said[0]


def _assert_names_both(error, address, old, new, what) -> None:
    text = str(error)
    assert isinstance(error, ModelChanged) and isinstance(error, ValueError)
    assert f"the server at {address} now serves model {new[:12]}" in text, text
    assert f"made with model {old[:12]}" in text and what in text, text
    assert "is not the key of the pixels" not in text
    assert (error.old_model_id, error.new_model_id) == (old, new)


@needs_triton
@pytest.mark.parametrize("first", ["repeat", "other prompt", "new image"])
def test_a_plain_call_after_the_restart_is_answered_by_the_new_model(switch, s2_crop, first):
    """Each way the change can show first: the memo (an `info` question), a miss that names the
    model (`cache_model_id`), pixels refused under the old model's key."""
    client, restart = switch
    image = _image(s2_crop)
    mirror = np.ascontiguousarray(image[:, :, ::-1])
    before = client.segment(image, "building", **BUILDING)
    assert client.segment(image, "building", **BUILDING).attrs["cache"] == "refiltered"
    old, new = restart()
    calls = {
        "repeat": lambda c: c.segment(image, "building", **BUILDING),
        "other prompt": lambda c: c.segment(image, "road", **BUILDING),
        "new image": lambda c: c.segment(mirror, "building", **BUILDING),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = calls[first](client)
        if first == "other prompt":  # the miss named the new model: no question was needed
            assert _cached_runs(client) == 2  # the miss, then the request with the pixels
        again = calls[first](client)  # now from the new model's memo
        repeat = client.segment(image, "building", **BUILDING)
    _assert_warned_once(caught, old, new)
    assert client.model_id == new and client.manifest.model_id == new
    assert client.engine.config(contract.SEGMENT).parameters  # configs read again, not stale
    assert contract.manifest_from_config(client.engine.config(contract.SEGMENT)).model_id == new
    assert got.attrs["cache"] == "encoded" and again.attrs["cache"] == "refiltered"
    _same(got, _fresh(client.address, calls[first]))
    _same(again, got)
    _same(repeat, _fresh(client.address, calls["repeat"]))
    assert not np.array_equal(repeat["score"].to_numpy(), before["score"].to_numpy())
    info = client.cache_info()
    assert info["model_id"] == new and info["results"]["entries"] <= 3


@needs_triton
def test_a_concept_of_the_old_model_raises_model_changed(switch, s2_crop):
    client, restart = switch
    image = _image(s2_crop)
    concept = client.encode_exemplars(image, [POSITIVE], name="roofs")
    client.segment(image, concept=concept, **BUILDING)
    old, new = restart()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ModelChanged) as first:  # the first call after the restart
            client.segment(image, concept=concept, **BUILDING)
        with pytest.raises(ModelChanged) as later:  # and every later one
            client.multi(image, ["building"], concepts=[concept], **BUILDING)
    _assert_warned_once(caught, old, new)
    for error in (first.value, later.value):
        _assert_names_both(error, client.address, old, new, "concept roofs")
        assert "re-encode it" in str(error)
    # re-encoded on the new model, it works, and equals what a fresh client makes
    fresh_concept = client.encode_exemplars(image, [POSITIVE], name="roofs")
    assert fresh_concept.model_id == new
    _same(
        client.segment(image, concept=fresh_concept, **BUILDING),
        _fresh(
            client.address,
            lambda c: c.segment(image, concept=c.encode_exemplars(image, [POSITIVE]), **BUILDING),
        ),
    )


@needs_triton
@pytest.mark.parametrize("first", ["memo", "server"])
def test_a_handles_refilter_of_an_old_result_raises_model_changed(switch, s2_crop, first):
    """The first refilter after the restart answered from the memo (the question before it
    notices) or run by the server (its answer names the new model); then the other."""
    client, restart = switch
    handle = client.image(_image(s2_crop))
    old_result = handle.segment("building", **BUILDING)
    kept = handle.refilter(score_thr=float(old_result["score"].median()))
    assert handle.status == "refiltered"
    old, new = restart()
    changes = [{"score_thr": 0.0}, {"mask_thr": 0.3}]  # memo-only, and a server run
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for change in changes if first == "memo" else changes[::-1]:
            with pytest.raises(ModelChanged) as error:
                handle.refilter(**change)
            # one request told the change (the question, or the miss): nothing was run again
            assert _cached_runs(client) == 1
            _assert_names_both(
                error.value, client.address, old, new, "the last result of this image handle"
            )
    _assert_warned_once(caught, old, new)
    assert handle.result is kept  # the handle keeps its last result as it was
    # a new prompt on the handle is the new model's
    _same(
        handle.segment("building", **BUILDING),
        _fresh(client.address, lambda c: c.segment(handle.prepared, "building", **BUILDING)),
    )
    assert len(handle.refilter(max_det=2)) == 2 and handle.status == "refiltered"


@needs_triton
def test_an_interactive_session_of_the_old_model_raises_model_changed(switch, s2_crop):
    client, restart = switch
    image = _image(s2_crop)
    session = client.interactive(image)
    session.add_point((100, 80))
    old, new = restart()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ModelChanged) as error:
            session.add_point((150, 100), positive=False)
        _assert_names_both(error.value, client.address, old, new, "this interactive session")
        assert "start a new one" in str(error.value)
        with pytest.raises(ModelChanged):  # stays refused, clearly
            session.everything(points_per_side=2)
        started = client.interactive(image)  # a new session runs on the new model
        clicked = started.add_point((100, 80))
    _assert_warned_once(caught, old, new)
    assert started.model_id == new
    _same_iou(clicked, _fresh(client.address, lambda c: c.interactive(image).add_point((100, 80))))


def _same_iou(a, b) -> None:
    np.testing.assert_array_equal(a["iou"].to_numpy(), b["iou"].to_numpy())
    for m, n in zip(a["mask"], b["mask"], strict=True):
        assert np.array_equal(np.asarray(m), np.asarray(n))


@needs_triton
def test_a_repository_without_cache_model_id_is_followed_through_info(
    server, tiny_repository, older_repository, s2_crop
):
    """A sam3_cached that does not answer `cache_model_id`: the client asks its `info` JSON
    (on a miss, a refusal and before a memo answer)."""
    if server.repository != tiny_repository.resolve():
        server.restart(tiny_repository)  # the older repository holds the other model
    assert "cache_model_id" not in (older_repository / contract.CACHED / "config.pbtxt").read_text()
    client = Sam3Client(server.address, connect_timeout=30)
    image = _image(s2_crop)
    try:
        client.segment(image, "building", **BUILDING)
        session = client.interactive(image)
        session.add_point((100, 80))
        old = client.model_id
        server.restart(older_repository)
        new = contract.load_manifest(older_repository).model_id
        assert new != old
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ModelChanged) as error:  # a miss, then pixels refused
                session.add_point((150, 100), positive=False)
            got = client.segment(image, "building", **BUILDING)  # from the memo before
        _assert_warned_once(caught, old, new)
        _assert_names_both(error.value, client.address, old, new, "this interactive session")
        assert client.model_id == new
        _same(got, _fresh(client.address, lambda c: c.segment(image, "building", **BUILDING)))
    finally:
        client.close()


def test_the_embedded_engine_answers_its_model_and_asks_nothing_before_a_memo_answer(
    tiny_repository, s2_crop
):
    client = Sam3Client.local(tiny_repository, precision="fp32")
    out = client.engine.infer(
        contract.CACHED,
        {contract.CACHE_OP: np.array([b"info"], object)},
        [contract.CACHE_STATUS, contract.CACHE_MODEL_ID],
    )
    assert out[contract.CACHE_MODEL_ID][0].decode() == client.model_id
    handle = client.image(_image(s2_crop))
    handle.segment("building", **BUILDING)
    runs = client.engine.executions[contract.CACHED]
    handle.refilter(max_det=2)
    assert handle.status == "refiltered"
    assert client.engine.executions[contract.CACHED] == runs  # no request at all in-process
    client.close()


@needs_triton
def test_a_pool_whose_servers_all_restart_on_another_model_follows_them(
    server, tiny_repository, other_repository, s2_crop, tmp_path
):
    """Both servers of a pool restarted on another repository, (1) between two calls: the
    client's question before its memo answer names the new model, the pool reads its servers'
    model again; (2) while a call waits for them: the pool takes them back on the model they
    all serve now (before, they stayed out for good: "the pool serves ...")."""
    if server.repository != tiny_repository.resolve():
        server.restart(tiny_repository)
    second = Restartable(tiny_repository, tmp_path)
    image = _image(s2_crop)
    try:
        pool = Sam3Client([server.address, second.address], connect_timeout=90)
        pool.engine.probe_interval = 0.5
        results = [pool.segment(image, "building", **BUILDING)]
        for onto in (other_repository, tiny_repository):
            old, new = pool.model_id, contract.load_manifest(onto).model_id
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if onto == other_repository:  # (1)
                    server.restart(onto)
                    second.restart(onto)
                    got = pool.segment(image, "building", **BUILDING)
                else:  # (2)
                    server.server.stop()
                    second.server.stop()
                    waiting = ThreadPoolExecutor(1).submit(
                        pool.segment, image, "building", **BUILDING
                    )
                    server.restart(onto)
                    second.restart(onto)
                    got = waiting.result(timeout=120)
            _assert_warned_once(caught, old, new)
            assert pool.model_id == new
            expected = _fresh(server.address, lambda c: c.segment(image, "building", **BUILDING))
            _same(got, expected)
            assert not np.array_equal(got["score"].to_numpy(), results[-1]["score"].to_numpy())
            results.append(got)
            assert pool.engine.wait_all_healthy(timeout=60), pool.engine.members()
        _same(results[0], results[2])  # the first model again, as it answered at first
        pool.close()
    finally:
        second.server.stop()


@needs_triton
def test_a_server_restarted_on_another_model_mid_scene_stops_the_run(
    server, tiny_repository, other_repository, crop_tif, tmp_path
):
    """The server restarted on another repository after the first tiles of a scene: the run
    stops with ModelChanged (no output mixing two models) instead of following the server."""
    from napari_sam3.prompts.query import Query
    from napari_sam3.scene.driver import segment_to_file
    from napari_sam3.scene.journal import journaled_tiles

    if server.repository != tiny_repository.resolve():
        server.restart(tiny_repository)
    client = Sam3Client(server.address, connect_timeout=30)
    old, new = client.model_id, contract.load_manifest(other_repository).model_id
    seen = {}

    def restart(done, total):
        seen["total"] = total
        if done == 2:  # one request in flight at most (one server): none now
            server.restart(other_repository)

    out = tmp_path / "results"
    out.mkdir()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with pytest.raises(ModelChanged) as error:
            query = Query.of(prompt="building", score_thr=0.0)
            segment_to_file(client, crop_tif, out / "scene.gpkg", query, progress=restart)
    client.close()
    total = seen["total"]
    assert total > 3
    _assert_names_both(error.value, client.address, old, new, f"the scene run of {crop_tif.name}")
    assert f"stopped after 2 of {total} tiles" in str(error.value), str(error.value)
    assert "nothing was written" in str(error.value)
    assert error.value.tiles_done == (2, total)
    # no output, no temporary file: the journal of the tiles the first model segmented alone
    # (the model is checked before a tile is journaled: none of the second model's is kept)
    (book,) = out.iterdir()
    assert book.name == "scene.gpkg.napari-sam3-partial"
    assert journaled_tiles(book) == 2
    assert json.loads((book / "run.json").read_text())["model"] == old

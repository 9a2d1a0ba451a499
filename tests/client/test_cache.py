"""Encode once, prompt many: one feature cache (sam3_cached) on a real tritonserver and embedded.

Encoder runs are counted by Triton's own statistics (`get_inference_statistics` of
sam3_unified_encoder) and, embedded, by the engine's execution counts of the same model.
Every cached answer is compared with an uncached one: the same prompt right after
`clear_cache()`, so that the encoder and the heads run for it.
"""

from __future__ import annotations

import re
import shutil
import threading

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.prompts.tokenizer import tokenize
from napari_sam3.runtime.cached import image_bytes, image_key

ENGINES = [
    "embedded",
    pytest.param("triton", marks=pytest.mark.needs_tritonserver),
]
POSITIVE, NEGATIVE = [40, 30, 140, 120], [200, 150, 280, 230]


@pytest.fixture(params=ENGINES)
def client(request, tiny_repository):
    if request.param == "embedded":
        made = Sam3Client.local(tiny_repository, precision="fp32")
    else:
        made = Sam3Client(request.getfixturevalue("triton_server").grpc_address)
    made.clear_cache()
    yield made
    made.clear_cache()  # the Triton server is shared with other tests
    made.close()


def _images(s2_crop):
    """Two different real images: the Sentinel-2 crop and its mirror image."""
    data = np.asarray(s2_crop.data)
    return data, np.ascontiguousarray(data[:, :, ::-1])


def _runs(client, model: str = contract.ENCODER) -> int:
    stats = client.engine.statistics(model)["model_stats"]
    return sum(int(s.get("execution_count", 0)) for s in stats)


def _graph_runs(client) -> dict[str, int]:
    graphs = (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS)
    return {g: _runs(client, g) for g in graphs}


def _same(a, b) -> None:
    """Two results are identical: rows, scores (exactly), boxes and every mask pixel."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for column in ("score", "iou"):
        if column in a:
            np.testing.assert_array_equal(a[column].to_numpy(), b[column].to_numpy())
    if len(a):
        np.testing.assert_array_equal(np.stack(a["box"]), np.stack(b["box"]))
    for m, n in zip(a["mask"], b["mask"], strict=True):
        assert np.array_equal(np.asarray(m), np.asarray(n))


def _prompts(image, concept):
    """The issue's sequence on one image: name -> callable(handle) -> DataFrame / Concept."""
    two = {"exemplar_boxes": [POSITIVE, NEGATIVE], "exemplar_labels": [1, 0]}
    return {
        "building": lambda h: h.segment("building", score_thr=0.0, dedup=None),
        "road": lambda h: h.segment("road", score_thr=0.0, dedup=None),
        "exemplars": lambda h: h.segment(**two, score_thr=0.0, dedup=None),
        "encode_exemplars": lambda h: h.encode_exemplars([POSITIVE, NEGATIVE], [1, 0]),
        "concept": lambda h: h.segment(concept=concept, score_thr=0.0, dedup=None),
        "multi": lambda h: h.multi(["building", "road", "water"], score_thr=0.0, dedup=None),
        "interactive": lambda h: _clicks(h.interactive()),
        "building again": lambda h: h.segment("building", score_thr=0.0, dedup=None),
    }


def _clicks(session):
    """Three interactive prompts: a click, a negative click, a box (the last result)."""
    session.add_point((100, 80))
    session.add_point((150, 100), positive=False)
    return session.add_box([20, 20, 200, 180])


@pytest.mark.parametrize("client", ENGINES, indirect=True)
def test_every_prompt_on_an_image_runs_the_encoder_once(client, s2_crop):
    first, second = _images(s2_crop)
    concept = client.encode_exemplars(first, [POSITIVE], name="roofs")
    prompts = _prompts(first, concept)
    uncached = {}
    for name, prompt in prompts.items():
        client.clear_cache()
        before = _runs(client)
        uncached[name] = prompt(client.image(first))
        assert _runs(client) - before == 1, f"{name}: an uncached prompt encodes the image"
    client.clear_cache()
    before, computed = _runs(client), client.cache_info()["features"]["computed"]
    handle = client.image(first)
    cached = {name: prompt(handle) for name, prompt in prompts.items()}
    assert _runs(client) - before == 1  # ten prompts of five kinds, one encoder pass
    for name in prompts:
        if name == "encode_exemplars":
            for t in contract.CONCEPT_OUTPUTS:
                np.testing.assert_array_equal(
                    cached[name].tensors()[t], uncached[name].tensors()[t]
                )
        else:
            _same(cached[name], uncached[name])
    assert len(cached["multi"]) > 0 and len(cached["building"]) > 0
    client.segment(second, "building", score_thr=0.0)
    client.interactive(second).add_point((60, 60))
    assert _runs(client) - before == 2  # a second image: once more
    info = client.cache_info()
    assert info["features"]["entries"] == 2
    assert info["features"]["computed"] - computed == 2
    assert info["features"]["bytes"] == 2 * info["image_bytes"]


@pytest.mark.parametrize("client", ENGINES, indirect=True)
def test_cached_text_prompt_equals_the_uncached_ensemble(client, s2_crop):
    """Independent of the cache code: the plain sam3_segment ensemble on the same input."""
    image, _ = _images(s2_crop)
    prepared = client.prepare(image)
    inputs = {
        contract.IMAGES: prepared.images_u8,
        contract.TOKEN_IDS: tokenize("building"),
        **client._exemplar_slots(prepared.letterbox, None, None),
        contract.SCORE_THR: np.array([0.0], np.float32),
    }
    plain = client.engine.infer(contract.SEGMENT, inputs, contract.RESULT_OUTPUTS)
    client.segment(prepared, "road")  # the image is cached now
    via_cache = client.segment(prepared, "building", score_thr=0.0, dedup=None)
    assert via_cache.attrs["cache"] == "hit"
    np.testing.assert_array_equal(via_cache["score"].to_numpy(), plain[contract.SCORES])
    assert len(via_cache) == len(plain[contract.SCORES]) > 0


@pytest.mark.parametrize("client", ENGINES, indirect=True)
def test_refiltering_runs_no_graph_and_equals_an_uncached_run(client, s2_crop):
    image, _ = _images(s2_crop)
    handle = client.image(image)
    handle.segment("building", score_thr=0.0, dedup=None)
    scores = handle.result["score"].to_numpy()
    assert len(scores) >= 3
    middle = float(np.median(scores))
    graphs = _graph_runs(client)
    changes = [
        {"score_thr": middle},
        {"score_thr": middle, "max_det": 2},
        {"score_thr": 0.0, "max_det": 2, "dedup": 0.5},
        {"score_thr": 0.0, "max_det": 100, "dedup": None},
    ]
    results = []
    for change in changes:
        results.append(handle.refilter(**change))
        assert handle.status == "refiltered", change
    assert _graph_runs(client) == graphs  # no graph at all, and no request either
    cached_runs = _runs(client, contract.CACHED)
    lowered = handle.refilter(mask_thr=0.3, score_thr=0.0)
    assert handle.status == "hit"
    assert _graph_runs(client) == graphs  # another mask_thr: only the postprocess
    assert _runs(client, contract.CACHED) == cached_runs + 1
    # looser than the answer held: the client cannot know the rest; the model's postprocess can
    looser = []
    for prompt, first, then in (
        ("road", {"max_det": 1}, {"max_det": 3}),
        ("water", {"score_thr": 0.99}, {"score_thr": 0.0}),
    ):
        handle.segment(prompt, **{"score_thr": 0.0, "dedup": None, **first})
        looser.append(handle.refilter(**then))
        assert handle.status == "hit", prompt
    assert len(looser[0]) == 3 and len(looser[1]) > 0
    changes += [{"mask_thr": 0.3}, {"prompt": "road", "max_det": 3}, {"prompt": "water"}]
    for change, result in zip(changes, [*results, lowered, *looser], strict=True):
        client.clear_cache()
        fresh = client.segment(
            image, **{"prompt": "building", "score_thr": 0.0, "dedup": None, **change}
        )
        assert fresh.attrs["cache"] == "encoded"
        _same(result, fresh)
    assert len(results[1]) == 2
    assert (results[0]["score"] >= np.float32(middle)).all() and len(results[0]) < len(scores)


def test_the_cache_never_holds_more_than_its_bound(tiny_repository, s2_crop):
    image = np.asarray(s2_crop.data)
    one = image_bytes(contract.load_manifest(tiny_repository).sizes)
    bound = int(2.5 * one)
    client = Sam3Client.local(tiny_repository, cache_bytes=bound, precision="fp32")
    images = [np.ascontiguousarray(np.roll(image, 17 * i, axis=2)) for i in range(4)]
    for img in images:
        client.segment(img, "building")
        info = client.cache_info()["features"]
        assert info["bytes"] <= bound and info["max_bytes"] == bound
    assert info["entries"] == 2 and info["evictions"] == 2
    before = _runs(client)
    client.segment(images[-1], "road")  # the newest is held
    assert _runs(client) == before
    client.segment(images[0], "road")  # the oldest was evicted: encoded again
    assert _runs(client) == before + 1
    assert client.cache_info()["features"]["bytes"] <= bound


def test_a_bound_too_small_for_one_image_is_refused_at_start(tiny_repository):
    one = image_bytes(contract.load_manifest(tiny_repository).sizes)
    with pytest.raises(ValueError, match=rf"{one - 1} bytes holds no image.* {one} bytes"):
        Sam3Client.local(tiny_repository, cache_bytes=one - 1, precision="fp32")
    with pytest.raises(ValueError, match="cache_bytes"):
        Sam3Client.local(tiny_repository, cache_bytes=0, precision="fp32")


@pytest.mark.parametrize("client", ENGINES, indirect=True)
def test_an_unknown_or_stale_id_is_resent_transparently(client, s2_crop):
    first, second = _images(s2_crop)
    handle = client.image(first)
    reference = handle.segment("building", score_thr=0.0, dedup=None)
    # The model's cache is emptied behind the client's back (a restart or an eviction would)
    client._features._info(op="clear")  # the model side only: this client still believes it held
    before = _runs(client)
    again = handle.segment("road", score_thr=0.0, dedup=None)
    assert again.attrs["cache"] == "encoded"  # a miss, then the pixels once more
    assert client.cache_info()["resent"] == 1
    assert _runs(client) == before + 1
    _same(handle.segment("building", score_thr=0.0, dedup=None), reference)
    # An id alone never selects another image's features: a key the cache lacks is a miss ...
    unknown = image_key(client.prepare(second).images_u8, client.model_id)
    out = client.engine.infer(
        contract.CACHED,
        {
            contract.CACHE_OP: np.array([b"ground"], object),
            contract.IMAGE_ID: np.array([unknown.encode()], object),
            contract.TOKEN_IDS: tokenize("building"),
        },
        [contract.CACHE_STATUS, contract.SCORES],
    )
    assert out[contract.CACHE_STATUS][0] == b"miss" and contract.SCORES not in out
    # ... and pixels sent under another image's id are refused, not cached under that id
    with pytest.raises(ValueError, match="not the key of the pixels"):
        client.engine.infer(
            contract.CACHED,
            {
                contract.CACHE_OP: np.array([b"encode"], object),
                contract.IMAGE_ID: np.array([handle.key.encode()], object),
                contract.IMAGES: client.prepare(second).images_u8,
            },
            [contract.CACHE_STATUS],
        )


@pytest.mark.needs_tritonserver
def test_two_clients_two_images_from_threads_never_mix(triton_server, s2_crop):
    images = _images(s2_crop)
    clients = [Sam3Client(triton_server.grpc_address) for _ in range(2)]
    clients[0].clear_cache()
    references = [
        (
            c.segment(img, "building", score_thr=0.0, dedup=None),
            c.interactive(img).add_point((90, 70)),
        )
        for c, img in zip(clients, images, strict=True)
    ]
    assert not np.array_equal(references[0][0]["score"], references[1][0]["score"])
    clients[0].clear_cache()
    computed = clients[0].cache_info()["features"]["computed"]
    failures = []
    start = threading.Barrier(4)

    def work(i: int) -> None:
        client, image = clients[i % 2], images[(i // 2 + i) % 2]
        expected = references[(i // 2 + i) % 2]
        handle = client.image(image)
        start.wait()
        try:
            for _ in range(3):
                got = handle.segment("building", score_thr=0.0, dedup=None)
                _same(got, expected[0])
                _same(handle.interactive().add_point((90, 70)), expected[1])
                client.segment(images[0] if image is images[1] else images[1], "road")
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(repr(error))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    # each image encoded once
    assert clients[0].cache_info()["features"]["computed"] - computed == 2
    for c in clients:
        c.clear_cache()
        c.close()


def test_the_same_new_image_from_two_threads_is_encoded_once(tiny_repository, s2_crop):
    client = Sam3Client.local(tiny_repository, precision="fp32")
    image, _ = _images(s2_crop)
    expected = client.segment(image, "building", score_thr=0.0, dedup=None)
    client.clear_cache()
    before = _runs(client)
    start, results = threading.Barrier(3), []

    def work(prompt):
        start.wait()
        results.append((prompt, client.segment(image, prompt, score_thr=0.0, dedup=None)))

    threads = [threading.Thread(target=work, args=(p,)) for p in ("building", "building", "road")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert _runs(client) - before == 1
    assert len(results) == 3
    for prompt, got in results:
        if prompt == "building":
            _same(got, expected)


@pytest.mark.needs_tritonserver
def test_a_server_whose_bound_holds_no_image_fails_at_start(tiny_repository, tmp_path):
    from napari_sam3.serving.server import ServeError, TritonServer

    repo = tmp_path / "small_bound"
    shutil.copytree(tiny_repository, repo)
    config = repo / contract.CACHED / "config.pbtxt"
    text = config.read_text()
    assert 'key: "cache_bytes"' in text
    config.write_text(
        re.sub(r'(key: "cache_bytes"\s*value \{\s*string_value: ")\d+"', r'\g<1>1000"', text)
    )
    one = image_bytes(contract.load_manifest(repo).sizes)
    with pytest.raises(ServeError, match=rf"cache bound 1000 bytes holds no image.* {one} bytes"):
        with TritonServer(repo, log_file=tmp_path / "log.txt"):
            pass

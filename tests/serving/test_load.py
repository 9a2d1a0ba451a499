"""sam3-serve under load: 16 clients at once on one real tritonserver whose queue is small.

The repository is the tiny model with `sam3-export --refresh --max-queue 1`: sam3_cached (where
every client request goes) holds one request waiting beside the one it runs, and answers the
others "busy" (Triton's UNAVAILABLE "Exceeds maximum queue size"), so the clients' busy path
really runs: each client asks again, with a growing jittered wait, within its deadline. The
sleepy test model (tests/_sleepy.py) has the same queue: one request asleep keeps it full for as
long as it sleeps, so a client's deadline passes while it is full on any machine.
"""

from __future__ import annotations

import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.runtime.engines.triton import ServerBusy
from napari_sam3.serving.server import TritonServer

from .._required import require
from .._sleepy import SLEEPY, Journal, add_sleepy

pytestmark = pytest.mark.needs_tritonserver

QUEUE = 1  # requests sam3_cached holds waiting beside the one it runs
CLIENTS = 16
KEYWORDS = ("building", "road", "field", "river")
BUSY = "Exceeds maximum queue size"
# how long the held request sleeps, and the client's deadline: far apart, so that the queue is
# still full when the client gives up however slowly a loaded machine answers "busy"
HELD_S = 8.0
DEADLINE_S = 1.5


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Journal:
    return Journal(tmp_path_factory.mktemp("journal") / "sleepy.txt")


@pytest.fixture(scope="module")
def small_queue(tiny_repository, journal, tmp_path_factory):
    """The tiny repository, its configs rewritten by sam3-export with a queue of QUEUE, and the
    sleepy test model with the same queue."""
    require("sam3_export")
    from sam3_export.cli import main as export

    repo = tmp_path_factory.mktemp("small_queue") / "repository"
    shutil.copytree(tiny_repository, repo, ignore=shutil.ignore_patterns("__pycache__"))
    assert export(["--refresh", "--out", str(repo), "--max-queue", str(QUEUE), "-q"]) == 0
    for model in (contract.CACHED, contract.MULTI):
        assert f"max_queue_size: {QUEUE}\n" in (repo / model / "config.pbtxt").read_text()
    add_sleepy(repo, journal, instances=1, max_queue=QUEUE)
    return repo


@pytest.fixture(scope="module")
def server(small_queue, tmp_path_factory):
    log = tmp_path_factory.mktemp("load") / "tritonserver.log"
    with TritonServer(small_queue, log_file=log) as running:
        yield running


def _image(s2_rgb_raster, i: int) -> np.ndarray:
    """A 160 x 200 crop of the Sentinel-2 scene, another for each client (bands last)."""
    r, c = 40 * (i % 4), 150 + 80 * (i // 4)
    return np.ascontiguousarray(np.moveaxis(s2_rgb_raster.data[:, r : r + 160, c : c + 200], 0, -1))


def _work(client: Sam3Client, image: np.ndarray, i: int) -> list:
    """Client i's requests, each kind in turn: one keyword, several on one pass, clicks."""
    options = {"score_thr": 0.0, "dedup": None}
    kind = i % 3
    if kind == 0:
        return [
            client.segment(image, KEYWORDS[i % 4], **options),
            client.segment(image, KEYWORDS[(i + 1) % 4], **options),
        ]
    if kind == 1:
        return [client.multi(image, [KEYWORDS[i % 4], KEYWORDS[(i + 2) % 4]], **options)]
    session = client.interactive(image)
    return [session.add_point((40 + 5 * i, 60)), session.add_point((120, 90), positive=False)]


def _same(a, b) -> None:
    """Two answers are identical: rows, scores or ious, boxes and every mask pixel."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    for column in ("score", "iou"):
        if column in a:
            np.testing.assert_array_equal(a[column].to_numpy(), b[column].to_numpy())
    if "keyword" in a:
        assert a["keyword"].tolist() == b["keyword"].tolist()
    if "box" in a:
        np.testing.assert_array_equal(np.stack(a["box"]), np.stack(b["box"]))
    for m, n in zip(a["mask"], b["mask"], strict=True):
        assert np.array_equal(np.asarray(m), np.asarray(n))


def _differ(a, b) -> bool:
    try:
        _same(a, b)
    except AssertionError:
        return True
    return False


@pytest.fixture(scope="module")
def alone(server, s2_rgb_raster):
    """Every client's answers, each request made alone, one after the other (then the server's
    feature cache is cleared, so that the flood encodes every image again)."""
    with Sam3Client(server.grpc_address) as one:
        answers = [_work(one, _image(s2_rgb_raster, i), i) for i in range(CLIENTS)]
        assert one.engine.busy_answers == 0
        one.clear_cache()
    return answers


def test_sixteen_clients_at_once_get_exactly_their_own_answers(server, alone, s2_rgb_raster):
    # a mix-up between clients would show: no two clients' answers are alike
    firsts = [answers[0] for answers in alone]
    assert all(_differ(firsts[i], firsts[j]) for i in range(CLIENTS) for j in range(i))
    # one client is a pool of two addresses of this server: "busy" must not drop a member
    pool_address = [server.grpc_address, f"localhost:{server.grpc_port}"]
    clients = [
        Sam3Client(pool_address if i == CLIENTS - 1 else server.grpc_address)
        for i in range(CLIENTS)
    ]
    got: list = [None] * CLIENTS
    errors: list = []
    start = threading.Barrier(CLIENTS)

    def run(i: int) -> None:
        image = _image(s2_rgb_raster, i)
        start.wait()
        try:
            got[i] = _work(clients[i], image, i)
        except BaseException as error:  # noqa: BLE001 - reported below, with its client
            errors.append((i, error))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors
    busy = [c.engine.busy_answers for c in clients]
    assert sum(busy) > 0, "the flood never filled the queue: the busy path did not run"
    for i in range(CLIENTS):
        assert len(got[i]) == len(alone[i])
        for mine, reference in zip(got[i], alone[i], strict=True):
            _same(mine, reference)
    pool = clients[-1].engine
    assert all(m["healthy"] and m["failures"] == 0 for m in pool.members()), pool.members()
    for client in clients:
        client.close()
    # and the server answers as before once the flood has passed
    with Sam3Client(server.grpc_address) as after:
        _same(_work(after, _image(s2_rgb_raster, 0), 0)[0], alone[0][0])


def _sleep_request(seconds: float, tag: int) -> list:
    tensors = []
    for name, value in (("seconds", np.array([seconds], np.float32)), ("tag", np.array([tag]))):
        tensor = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors


def test_a_server_busy_past_the_deadline_is_a_clear_error_then_answers_again(
    server, alone, s2_rgb_raster, journal
):
    """The sleepy model has sam3_cached's queue (one instance, QUEUE waiting): one request
    asleep and QUEUE waiting keep it full, for as long as the first sleeps, on any machine."""
    raw = grpcclient.InferenceServerClient(server.grpc_address)
    answers: list = []

    def send(seconds: float, tag: int) -> None:
        raw.async_infer(
            SLEEPY, _sleep_request(seconds, tag), lambda result, error: answers.append(error)
        )

    held = journal.new_tag()
    send(HELD_S, held)
    assert journal.wait_for("start", held)
    for _ in range(QUEUE):
        send(0.0, journal.new_tag())
    client = Sam3Client(server.grpc_address, deadline=DEADLINE_S)
    seconds = {"seconds": np.array([0.0], np.float32), "tag": np.array([journal.new_tag()])}
    with pytest.raises(ServerBusy) as error:
        client.engine.infer(SLEEPY, seconds, ["slept"])
    assert journal.entries(held) == ["start"], "the held request ended before the client gave up"
    message = str(error.value)
    assert isinstance(error.value, ConnectionError) and isinstance(error.value, TimeoutError)
    assert message.startswith(f"Triton at {server.grpc_address} was too busy to take {SLEEPY}")
    assert BUSY in message and "--deadline" in message
    tries = client.engine.busy_answers
    assert tries >= 2 and f"at each of {tries} tries" in message  # asked again before giving up
    # the held requests are answered once the first wakes; then the client's own, and sam3_cached
    assert journal.wait_for("end", held)
    end = time.monotonic() + 60
    while len(answers) < QUEUE + 1 and time.monotonic() < end:
        time.sleep(0.05)
    assert answers == [None] * (QUEUE + 1), [a and a.message() for a in answers]
    raw.close()
    assert client.engine.infer(SLEEPY, seconds, ["slept"])["slept"][0] == 0.0
    _same(_work(client, _image(s2_rgb_raster, 0), 0)[0], alone[0][0])
    client.close()

"""`ConnectionSpec`: the one way a client is made (CLI, panel settings, batch workers).

On the code before: three client builders (cli.py, widgets/connection.py, scene/batch.py), timeout
defaults in six places (engines/pool.py with 30 s / 600 s of its own: 30 / 300), runtime and
precision names in four, the seconds check in three; no total deadline on the CLI or the panel.
"""

from __future__ import annotations

import inspect
import json
import pickle

import pytest

from napari_sam3 import Sam3Client
from napari_sam3.client.connection import (
    DEADLINE_FACTOR,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    PRECISION_CHOICES,
    RUNTIME_CHOICES,
    ConnectionSpec,
    Timeouts,
)
from napari_sam3.plugin.settings import (
    ConnectionSettings,
    load_connection,
    save_connection,
    settings_path,
)
from napari_sam3.runtime import onnx_runner
from napari_sam3.runtime.engines.pool import PoolEngine
from napari_sam3.runtime.engines.triton import TritonEngine

EMBEDDED = dict(repository="models/sam3", runtime="onnxruntime", precision="fp32", threads=3,
                cache_bytes=123_456_789)  # fmt: skip
TRITON = dict(servers=("10.0.0.1:8001", "10.0.0.2:8001"), tls=True,
              root_certificates="certs/ca.pem", certificate_chain="certs/client.pem",
              private_key="certs/client.key", connect_timeout=12.5, request_timeout=90.0,
              deadline=135.5)  # fmt: skip


@pytest.fixture(autouse=True)
def _settings_here(tmp_path, monkeypatch):
    monkeypatch.setenv("NAPARI_SAM3_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.parametrize("fields", [EMBEDDED, TRITON], ids=["embedded", "triton"])
def test_a_spec_round_trips_through_the_saved_panel_settings(fields, tmp_path):
    spec = ConnectionSpec(**fields)
    # every field differs from its default: a field the settings drop fails the test
    assert set(spec.changed()) == set(fields)
    save_connection(ConnectionSettings.from_spec(spec, connect_on_start=True))
    loaded = load_connection()
    assert loaded.connect_on_start and loaded.spec() == spec
    assert pickle.loads(pickle.dumps(spec)) == spec and hash(spec) == hash(ConnectionSpec(**fields))
    # the other engine's remembered fields survive a switch
    other = ConnectionSpec(**(TRITON if spec.embedded else EMBEDDED))
    both = ConnectionSettings.from_spec(other, base=loaded)
    assert both.spec() == other
    assert ConnectionSettings.from_spec(spec, base=both).spec() == spec
    saved = json.loads(settings_path().read_text())["connection"]
    assert saved["engine"] == ("embedded" if spec.embedded else "triton")


def test_paths_are_absolute_and_addresses_normalised(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = ConnectionSpec(servers=" a:8001, b:8001,a:8001 ", tls=True, root_certificates="ca.pem")
    assert spec.servers == ("a:8001", "b:8001") and spec.where == "a:8001,b:8001"
    assert spec.root_certificates == str(tmp_path / "ca.pem")
    assert ConnectionSpec(repository="repo").repository == str(tmp_path / "repo")
    assert ConnectionSpec(servers="a:8001", request_timeout=40).total_deadline == 60.0
    assert ConnectionSpec(servers="a:8001", deadline=45).total_deadline == 45.0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "needs a model repository folder"),
        ({"repository": "r", "servers": "a:8001"}, "not both"),
        ({"repository": "r", "tls": True}, r"--tls \(tls\): for Triton servers"),
        ({"repository": "r", "connect_timeout": 3}, "--connect-timeout .*: for Triton"),
        ({"servers": "a:8001", "threads": 2}, r"--threads \(threads\): for the embedded"),
        ({"servers": "a:8001", "cache_bytes": 2**30}, "--cache-mib .*: for the embedded"),
        ({"servers": "a:8001", "root_certificates": "ca.pem"}, "need --tls"),
        ({"servers": "a:8001", "tls": True, "private_key": "k.pem"}, "together"),
        ({"servers": "a:8001", "request_timeout": 0}, "positive number of seconds, got 0"),
        ({"servers": "a:8001", "deadline": -1}, r"--deadline \(deadline\) must be a positive"),
        ({"servers": "a:8001", "connect_timeout": "10"}, "positive number of seconds, got '10'"),
        ({"servers": "a:8001", "connect_timeout": True}, "positive number of seconds"),
        ({"repository": "r", "runtime": "tensorrt"}, "unknown runtime 'tensorrt'"),
        ({"repository": "r", "precision": "fp16"}, "unknown precision 'fp16'"),
        ({"repository": "r", "threads": 2.0}, "--threads .* must be an integer"),
        ({"repository": "r", "cache_bytes": 0}, "--cache-mib .* must be an integer from 1 to"),
        ({"servers": [8001]}, "Triton addresses"),
    ],
)
def test_bad_specs_say_what_to_give(fields, message):
    with pytest.raises(ValueError, match=message):
        ConnectionSpec(**fields)


def test_defaults_names_and_the_seconds_check_have_one_home():
    names = {"connect_timeout": DEFAULT_CONNECT_TIMEOUT, "request_timeout": DEFAULT_REQUEST_TIMEOUT,
             "liveness_timeout": DEFAULT_LIVENESS_TIMEOUT}  # fmt: skip
    for made in (Sam3Client.__init__, ConnectionSpec, ConnectionSettings):
        parameters = inspect.signature(made).parameters
        for name, value in names.items():
            if name in parameters:
                assert parameters[name].default == value, (made, name)
    # the engines take one Timeouts, whose defaults are the same
    for made in (TritonEngine.__init__, PoolEngine.__init__):
        assert inspect.signature(made).parameters["timeouts"].default is None
    defaults = Timeouts()
    assert (defaults.connect, defaults.request, defaults.liveness) == tuple(names.values())
    assert RUNTIME_CHOICES == (onnx_runner.AUTO, *onnx_runner.RUNTIMES)
    assert PRECISION_CHOICES == (onnx_runner.AUTO, *onnx_runner.PRECISIONS)
    for bad in ({"connect_timeout": 0}, {"request_timeout": "600"}, {"deadline": 0}):
        with pytest.raises(ValueError, match="positive number of seconds"):
            ConnectionSettings(**bad)


def test_connect_makes_the_embedded_client_with_its_threads_and_cache(tiny_repository):
    spec = ConnectionSpec(repository=tiny_repository, runtime="onnxruntime", precision="fp32",
                          threads=1, cache_bytes=2**24)  # fmt: skip
    with spec.connect() as client:
        assert client.engine.threads == 1
        assert (client.engine.runtime, client.engine.precision) == ("onnxruntime", "fp32")
        assert client.cache_info()["features"]["max_bytes"] == 2**24


def test_connect_passes_the_timeouts_and_the_deadline(triton_server):
    spec = ConnectionSpec(servers=triton_server.grpc_address, connect_timeout=30,
                          request_timeout=40, deadline=50)  # fmt: skip
    with spec.connect() as client:
        assert (client.engine.request_timeout, client.engine.deadline) == (40.0, 50.0)
    # two addresses of the same server make a pool: every member gets the same times
    port = triton_server.grpc_port
    pool = ConnectionSpec(servers=f"127.0.0.1:{port},localhost:{port}", connect_timeout=30,
                          request_timeout=40, deadline=50)  # fmt: skip
    with pool.connect() as client:
        members = [m.engine for m in client.engine._members if m.engine is not None]
        assert members and {(e.request_timeout, e.deadline) for e in members} == {(40.0, 50.0)}


def test_timeouts_are_checked_once_and_give_the_deadline():
    assert Timeouts(request=20).total == DEADLINE_FACTOR * 20
    assert Timeouts(request=20, deadline=25).total == 25
    for bad in ({"connect": 0}, {"request": -1}, {"liveness": float("nan")}, {"deadline": "5"}):
        with pytest.raises(ValueError, match="positive number of seconds"):
            Timeouts(**bad)
    with pytest.raises(ValueError, match="retries"):
        Timeouts(retries=-1)

"""Several addresses for one server cost nothing per call: gRPC's resolver and round_robin.

On the code before: the client resolved the name once and kept one channel per address, taking
turns; `localhost` -> ::1 (refused: the server listens on 127.0.0.1) then 127.0.0.1 made every
other call fail and wait out a 0.5 s retry backoff (0.52 s a call instead of 0.018 s).
Where `localhost` has one address (this machine), the refusing one is given in an explicit list.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.client.connection import Timeouts
from napari_sam3.core import contract
from napari_sam3.prompts.tokenizer import tokenize
from napari_sam3.runtime.engines import triton as triton_engine
from napari_sam3.runtime.engines.triton import TritonEngine, grpc_target
from napari_sam3.serving.ports import free_port

needs_server = pytest.mark.needs_tritonserver


def test_targets():
    assert grpc_target("localhost:8001") == "dns:///localhost:8001"
    assert grpc_target("10.0.0.1:8001,10.0.0.2:8001") == "ipv4:10.0.0.1:8001,10.0.0.2:8001"
    assert grpc_target(["[::1]:8001"]) == "ipv6:[::1]:8001"
    with pytest.raises(ValueError, match="give that name once"):
        grpc_target("a:1,b:1")
    with pytest.raises(ValueError, match="all be IPv4 or all IPv6"):
        grpc_target("127.0.0.1:1,[::1]:1")
    with pytest.raises(ValueError, match="not a TCP port"):
        grpc_target("localhost:99999")


@needs_server
def test_a_dead_address_beside_a_live_one_costs_no_retry(triton_server, monkeypatch):
    live = triton_server.grpc_address
    dead = f"127.0.0.1:{free_port()}"
    waits: list[float] = []
    real_sleep = time.sleep

    def counting_sleep(seconds):
        waits.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(triton_engine.time, "sleep", counting_sleep)
    tokens = {contract.TOKEN_IDS: tokenize("building")}
    expected = None
    # One channel over both addresses (as a name resolving to a refusing and a live address).
    engine = TritonEngine([dead, live], Timeouts(connect=30))
    assert engine.target == f"ipv4:{dead},{live}"
    localhost = Sam3Client(f"localhost:{live.rsplit(':', 1)[1]}", connect_timeout=30)
    assert localhost.engine.target.startswith("dns:///localhost:")
    for call in (engine.infer, localhost.engine.infer):
        waits.clear()
        for _ in range(8):
            out = call(contract.TEXT, tokens, [contract.TEXT_FEATURES])[contract.TEXT_FEATURES]
            expected = out if expected is None else expected
            np.testing.assert_array_equal(out, expected)
        assert waits == [], f"calls waited {waits} (retries)"
    engine.close()
    localhost.close()

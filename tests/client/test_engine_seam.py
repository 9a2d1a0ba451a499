"""The Engine protocol is the seam between the client and what runs the models: a client given
an engine (one made directly, or any object offering the protocol) answers as the client that
made its own; an object that is not an engine is refused by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.core.errors import Sam3Error
from napari_sam3.runtime.engines import LocalEngine
from napari_sam3.runtime.engines.protocol import NotAnEngine

from ..conftest import SUITE_PRECISION


class Relay:
    """A small engine of its own: every member of the protocol passed on to another engine,
    the requests counted."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.requests: list[str] = []

    @property
    def address(self) -> str:
        return f"relay:{self.inner.address}"

    @property
    def local(self) -> bool:
        return self.inner.local

    def config(self, model_name):
        return self.inner.config(model_name)

    def infer(self, model_name, inputs, output_names=None):
        self.requests.append(model_name)
        return self.inner.infer(model_name, inputs, output_names)

    def statistics(self, model_name):
        return self.inner.statistics(model_name)

    def concurrency(self):
        return self.inner.concurrency()

    def refresh(self):
        self.inner.refresh()

    def runtime_summary(self, reasons=False):
        return self.inner.runtime_summary(reasons)

    def runtime_choices(self):
        return self.inner.runtime_choices()

    def loaded_graphs(self):
        return self.inner.loaded_graphs()

    def cache_bounds(self, features=None, heads=None):
        return self.inner.cache_bounds(features, heads)

    def close(self):
        self.inner.close()


def assert_same_frame(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns) and len(got) == len(expected) > 0
    np.testing.assert_array_equal(got["score"].values, expected["score"].values)
    np.testing.assert_array_equal(np.stack(got["box"].values), np.stack(expected["box"].values))
    assert list(got["keyword"]) == list(expected["keyword"])
    for a, b in zip(got["mask"], expected["mask"], strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def answers(client: Sam3Client, image) -> list[pd.DataFrame]:
    return [
        client.segment(image, "building", score_thr=0.0, dedup=0.5),
        client.multi(image, ["road", "water"], score_thr=0.0, dedup=None),
    ]


@pytest.fixture(scope="module")
def expected(tiny_repository, s2_crop) -> list[pd.DataFrame]:
    with Sam3Client.local(tiny_repository, precision=SUITE_PRECISION) as client:
        return answers(client, s2_crop)


def test_a_client_given_a_local_engine_answers_as_sam3client_local(
    tiny_repository, s2_crop, expected
):
    engine = LocalEngine(tiny_repository, precision=SUITE_PRECISION)
    with Sam3Client(engine=engine) as client:
        assert client.engine is engine and client.address == engine.address
        for got, want in zip(answers(client, s2_crop), expected, strict=True):
            assert_same_frame(got, want)
    with pytest.raises(RuntimeError, match="closed"):  # the client closed its engine
        engine.infer("sam3_cached", {})


def test_a_client_given_any_conforming_engine_answers_the_same(tiny_repository, s2_crop, expected):
    relay = Relay(LocalEngine(tiny_repository, precision=SUITE_PRECISION))
    with Sam3Client(engine=relay) as client:
        assert client.address.startswith("relay:local:")
        for got, want in zip(answers(client, s2_crop), expected, strict=True):
            assert_same_frame(got, want)
        assert relay.requests and set(relay.requests) == {"sam3_cached"}
        # the scene's cache bounds reach the engine through the protocol, and are restored
        before = relay.inner.cache_bounds()
        with client.cache_limits(features_bytes=3 * client.cache_info()["image_bytes"]):
            assert relay.inner.cache_bounds()[0] == 3 * client.cache_info()["image_bytes"]
        assert relay.inner.cache_bounds() == before


class HalfEngine:
    address = "half:0"

    def infer(self, model_name, inputs, output_names=None):
        raise AssertionError("never called")

    config = "not callable"


def test_an_object_that_is_not_an_engine_is_refused_by_its_missing_members():
    with pytest.raises(NotAnEngine) as refused:
        Sam3Client(engine=HalfEngine())
    message = str(refused.value)
    assert message.startswith("HalfEngine is not an engine: it lacks ")
    lacks = message.split("it lacks ")[1].split(".")[0].split(", ")
    assert set(lacks) == {
        "cache_bounds",
        "close",
        "concurrency",
        "config",  # there, but not a method
        "loaded_graphs",
        "local",
        "refresh",
        "runtime_choices",
        "runtime_summary",
        "statistics",
    }
    assert isinstance(refused.value, TypeError) and isinstance(refused.value, Sam3Error)


def test_an_address_and_an_engine_together_or_neither_are_refused(tiny_repository):
    with pytest.raises(ValueError, match="Sam3Client.local"):
        Sam3Client()
    engine = LocalEngine(tiny_repository, precision=SUITE_PRECISION)
    try:
        with pytest.raises(ValueError, match="not both"):
            Sam3Client("localhost:8001", engine=engine)
    finally:
        engine.close()

"""Every engine offers the one Engine interface the client, scenes and panel use."""

from __future__ import annotations

import inspect

import pytest

from napari_sam3.runtime.engines import Engine, LocalEngine
from napari_sam3.runtime.engines.pool import PoolEngine
from napari_sam3.runtime.engines.protocol import MEMBERS, PROPERTIES
from napari_sam3.runtime.engines.triton import TritonEngine


@pytest.mark.parametrize("cls", [LocalEngine, TritonEngine, PoolEngine])
def test_each_engine_class_has_every_member(cls):
    # `address` is set per instance by the remote engines; every other member is on the class
    missing = [name for name in MEMBERS if name != "address" and not hasattr(cls, name)]
    assert not missing, missing
    assert len(MEMBERS) >= 11
    # ... and the methods take the protocol's arguments, by the same names and kinds
    for name in MEMBERS:
        if name not in PROPERTIES:
            assert _arguments(getattr(cls, name)) == _arguments(getattr(Engine, name)), name
    assert cls.local is (cls is LocalEngine)


def _arguments(method) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(method).parameters.values()]


def test_the_embedded_engine_is_an_engine(tiny_repository):
    engine = LocalEngine(tiny_repository, precision="fp32")
    assert isinstance(engine, Engine)
    assert engine.concurrency() == 1 and engine.runtime_summary().startswith(("openvino", "onnx"))
    engine.refresh()
    assert "sam3_cached" in engine.configs
    assert engine.local and set(engine.runtime_choices()) == set(engine.choices)
    before = engine.cache_bounds(features=2 * engine.cache_bounds()[0])
    assert engine.cache_bounds(*before) == (2 * before[0], before[1])

"""The embedded engine holds each graph's weights once and loads only the graphs a session uses
(issue 28). Memory figures live in bench/bench_memory.py; these tests prove the mechanisms:
which file OpenVINO compiles, that fp32 still means fp32 weights on every host, that mapped
weight pages are handed back, and which graphs each kind of session loads."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.runtime import host as H
from napari_sam3.runtime import onnx_runner as R

from .conftest import skip_unless_native_bf16

ov = H.import_openvino()


def _constant_types(xml) -> set[str]:
    model = ov.Core().read_model(str(xml))
    return {
        op.get_output_element_type(0).get_type_name()
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and op.get_output_size()
    }


def test_bf16_compiles_from_an_fp16_ir_written_once(tiny_repository, tmp_path):
    onnx_path = contract.graph_path(tiny_repository, contract.TEXT)
    assert R.openvino_source(onnx_path, "fp32", tmp_path) == onnx_path
    assert R.openvino_source(onnx_path, "bf16", None) == onnx_path
    xml = R.openvino_source(onnx_path, "bf16", tmp_path)
    assert xml.parent.parent == tmp_path and xml.suffix == ".xml"
    assert "f16" in _constant_types(xml)  # the weights are stored at half the size
    written = xml.with_suffix(".bin").stat().st_mtime_ns
    assert R.openvino_source(onnx_path, "bf16", tmp_path) == xml  # reused, not rewritten
    assert xml.with_suffix(".bin").stat().st_mtime_ns == written
    assert [p.name for p in tmp_path.iterdir()] == ["ir-f16"]  # no partial folder left


def test_the_fp16_ir_is_the_same_graph(tiny_repository, tmp_path):
    """Compiled at fp32 on any CPU, the IR answers as the ONNX file does, within fp16 weight
    rounding (2^-11 relative per weight)."""
    onnx_path = contract.graph_path(tiny_repository, contract.ENCODER)
    xml = R.openvino_source(onnx_path, "bf16", tmp_path)
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    a, b = (core.compile_model(str(p), "CPU", config) for p in (onnx_path, xml))
    image = np.random.default_rng(0).integers(0, 256, tuple(a.inputs[0].shape), np.uint8)
    out_a, out_b = a(image), b(image)
    for port in a.outputs:
        x = out_a[port]
        y = out_b[b.output(port.get_any_name())]
        assert np.abs(x - y).max() <= 5e-3 * np.abs(x).max(), port.get_any_name()


class _CoreWithoutBf16:
    """OpenVINO's Core on a CPU that quietly compiles a bf16 hint at f32 (as an AVX2-only CPU
    does): records what it was asked to compile."""

    def __init__(self):
        self.core = ov.Core()
        self.asked = []

    def compile_model(self, source, device, config):
        self.asked.append((source, config["INFERENCE_PRECISION_HINT"]))
        return self.core.compile_model(
            source, device, {**config, "INFERENCE_PRECISION_HINT": "f32"}
        )


def test_fp32_always_runs_the_exported_fp32_weights(tiny_repository, tmp_path):
    onnx_path = str(contract.graph_path(tiny_repository, contract.TEXT))
    core = _CoreWithoutBf16()
    planned = R.Choice("openvino", "bf16", "planned", "auto")
    compiled, choice = R.compile_openvino(core, onnx_path, planned, folder=tmp_path)
    assert choice.precision == "fp32" and "compiled it at fp32" in choice.reason
    (first, first_hint), (second, second_hint) = core.asked
    assert first.endswith("model.xml") and first_hint == "bf16"  # the fp16 IR, for bf16
    assert second == onnx_path and second_hint == "f32"  # then the ONNX file again, for fp32


def test_on_a_native_cpu_bf16_runs_the_fp16_ir(tiny_repository, tmp_path):
    skip_unless_native_bf16()
    onnx_path = str(contract.graph_path(tiny_repository, contract.TEXT))
    planned = R.Choice("openvino", "bf16", "planned", "auto")
    compiled, held = R.compile_openvino(ov.Core(), onnx_path, planned, folder=tmp_path)
    assert held.precision == "bf16" and held.reason == "planned"
    assert R.compiled_precision(compiled.get_property("INFERENCE_PRECISION_HINT")) == "bf16"
    assert (tmp_path / "ir-f16" / "model.xml").is_file()


def test_mapped_weight_pages_are_handed_back(tmp_path):
    weights = tmp_path / "model.onnx.data"
    weights.write_bytes(np.random.default_rng(1).bytes(1 << 20))
    other = tmp_path / "other.bin"
    other.write_bytes(b"\0" * 4096)
    with weights.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert mapped[::4096] is not None  # touch every page
        assert R.release_file_pages([other]) == 0  # not mapped: nothing to hand back
        released = R.release_file_pages([weights.resolve(), other])
        assert released >= 1 << 20
        assert mapped[100:110] == weights.read_bytes()[100:110]  # still readable after
    assert R.release_file_pages([]) == 0


@pytest.fixture
def fresh_client(tiny_repository):
    client = Sam3Client.local(tiny_repository, runtime="openvino", precision="fp32")
    yield client
    client.close()


def test_a_text_session_loads_only_what_text_needs(fresh_client):
    assert fresh_client.engine.loaded_graphs() == []
    assert "loaded=nothing yet" in repr(fresh_client)
    image = np.random.default_rng(2).integers(0, 256, (96, 96, 3), np.uint8)
    fresh_client.segment(image, "building", score_thr=0.0)
    assert set(fresh_client.engine.loaded_graphs()) == {
        contract.ENCODER,
        contract.TEXT,
        contract.DECODER,
    }
    assert "loaded=encoder, text, decoder" in repr(fresh_client)
    fresh_client.interactive(image).add_point((40, 40))
    assert set(fresh_client.engine.loaded_graphs()) - {contract.ENCODER, contract.TEXT,
                                                      contract.DECODER} == {"sam3_pvs_decoder"}  # fmt: skip


def test_a_click_session_never_loads_the_text_encoder(fresh_client):
    image = np.random.default_rng(3).integers(0, 256, (96, 96, 3), np.uint8)
    fresh_client.interactive(image).add_point((40, 40))
    assert set(fresh_client.engine.loaded_graphs()) == {contract.ENCODER, "sam3_pvs_decoder"}

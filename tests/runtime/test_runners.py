"""OpenVINO and ONNX Runtime on the same exported graphs: parity, compile errors, the model cache."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner as R

from .._required import require
from .conftest import skip_unless_native_bf16

require("openvino")

# OpenVINO fp32 against ONNX Runtime fp32, per output: max |difference| <= 1e-4 x max |value|
# (measured on the tiny graphs: <= 1e-6; on the full-size ones: <= 3e-5).
FP32_BOUND = 1e-4
ALL_GRAPHS = (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS)


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12))


@pytest.mark.parametrize("graph", ALL_GRAPHS)
def test_openvino_fp32_matches_onnxruntime(tiny_repository, graph_feeds, graph, tmp_path):
    path = contract.graph_path(tiny_repository, graph)
    ort_runner = R.make_runner(path, "onnxruntime", "fp32")
    ov_runner = R.make_runner(path, "openvino", "fp32", threads=2, cache_dir=tmp_path)
    assert (str(ort_runner.choice), str(ov_runner.choice)) == ("onnxruntime/fp32", "openvino/fp32")
    assert ov_runner.output_names == ort_runner.output_names
    expected = ort_runner.run(graph_feeds[graph])
    got = ov_runner.run(graph_feeds[graph])
    for name, value in expected.items():
        assert got[name].shape == value.shape and got[name].dtype == value.dtype, name
        if value.dtype == np.bool_:
            assert np.array_equal(got[name], value), name
        else:
            assert relative_difference(value, got[name]) <= FP32_BOUND, name


def _scaler_graph(path) -> None:
    """A valid ONNX-ML graph (Scaler) that ONNX Runtime runs and OpenVINO cannot convert."""
    node = helper.make_node("Scaler", ["x"], ["y"], domain="ai.onnx.ml", offset=[0.0], scale=[2.0])
    graph = helper.make_graph(
        [node],
        "scaler",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 1)]
    path.parent.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))


def test_a_graph_one_runtime_cannot_compile_names_graph_and_runtime(tmp_path):
    path = tmp_path / "sam3_odd" / "1" / "model.onnx"
    _scaler_graph(path)
    with pytest.raises(R.GraphCompileError) as info:
        R.make_runner(path, "openvino", "fp32", cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert "sam3_odd" in message and "openvino" in message and "Scaler" in message
    assert "runtime='onnxruntime'" in message
    # the other runtime still runs the same file
    out = R.make_runner(path, "onnxruntime", "fp32").run({"x": np.ones((2, 3), np.float32)})
    assert np.array_equal(out["y"], np.full((2, 3), 2.0, np.float32))


def test_a_corrupt_graph_is_a_clear_error_in_both_runtimes(tmp_path):
    path = tmp_path / "sam3_text" / "1" / "model.onnx"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not an onnx file")
    for runtime in R.RUNTIMES:
        with pytest.raises(R.GraphCompileError, match=f"sam3_text .* in {runtime}"):
            R.make_runner(path, runtime, "fp32", cache_dir=tmp_path / "cache")


def test_the_openvino_cache_is_used_and_never_stale(tiny_repository, graph_feeds, tmp_path):
    """The second load reads the compiled blob; a graph re-exported at the same path with other
    weights (same size) compiles anew, never answered by the stale blob."""
    graph = contract.TEXT
    cache = tmp_path / "cache"
    copy = tmp_path / graph / "1" / "model.onnx"
    copy.parent.mkdir(parents=True)
    model = onnx.load(str(contract.graph_path(tiny_repository, graph)))
    onnx.save(model, str(copy))
    feed = graph_feeds[graph]
    first = R.make_runner(copy, "openvino", "fp32", cache_dir=cache).run(feed)

    def cached_files():
        return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())

    blobs = cached_files()
    assert blobs, "OpenVINO wrote nothing to its cache"
    again = R.make_runner(copy, "openvino", "fp32", cache_dir=cache).run(feed)
    assert cached_files() == blobs  # served from the cache
    np.testing.assert_array_equal(again[contract.TEXT_FEATURES], first[contract.TEXT_FEATURES])

    for init in model.graph.initializer:  # "re-export": every float weight scaled
        if init.data_type == TensorProto.FLOAT and init.raw_data:
            values = onnx.numpy_helper.to_array(init) * np.float32(1.5)
            init.CopyFrom(onnx.numpy_helper.from_array(values, init.name))
    onnx.save(model, str(copy))
    changed = R.make_runner(copy, "openvino", "fp32", cache_dir=cache).run(feed)
    expected = R.make_runner(copy, "onnxruntime", "fp32").run(feed)
    assert (
        relative_difference(expected[contract.TEXT_FEATURES], first[contract.TEXT_FEATURES]) > 0.01
    )
    assert (
        relative_difference(expected[contract.TEXT_FEATURES], changed[contract.TEXT_FEATURES])
        <= FP32_BOUND
    )


def test_the_default_cache_lies_in_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert R.default_cache_dir() == tmp_path / "napari-sam3" / "openvino"


def test_explicit_bf16_is_refused_on_a_cpu_without_it(tiny_repository, tmp_path, avx2_host):
    why = avx2_host.native_bf16()[1]
    with pytest.raises(R.PrecisionUnavailable, match="silently compute fp32") as info:
        R.make_runner(contract.graph_path(tiny_repository, contract.TEXT), "openvino", "bf16")
    assert why in str(info.value)
    auto = R.make_runner(
        contract.graph_path(tiny_repository, contract.TEXT), "openvino", "auto", cache_dir=tmp_path
    )
    assert auto.choice.precision == "fp32" and why in auto.choice.reason


def test_explicit_bf16_compiles_at_bf16_on_a_native_cpu(tiny_repository, graph_feeds, tmp_path):
    """Where this CPU computes bf16 (elsewhere explicit bf16 is refused, as
    test_explicit_bf16_is_refused_on_a_cpu_without_it shows on any machine): OpenVINO reports
    bf16, and each feature map differs from fp32 by more than fp32's bound, within bf16's."""
    skip_unless_native_bf16()
    path = contract.graph_path(tiny_repository, contract.ENCODER)
    runner = R.make_runner(path, "openvino", "bf16", cache_dir=tmp_path)
    hint = runner.compiled.get_property("INFERENCE_PRECISION_HINT")
    assert R.compiled_precision(hint) == "bf16" == runner.choice.precision
    out = runner.run(graph_feeds[contract.ENCODER])
    ref = R.make_runner(path, "onnxruntime", "fp32").run(graph_feeds[contract.ENCODER])
    # the position encoding (DET_POS) is a constant, folded at compile time: left out
    differences = {name: relative_difference(ref[name], out[name]) for name in contract.DET_FPN}
    assert max(differences.values()) <= 0.05, differences
    assert min(differences.values()) > FP32_BOUND, differences


def test_logic_reads_runtime_and_precision_from_parameters(tiny_repository, tmp_path):
    version = str(contract.graph_path(tiny_repository, contract.TEXT).parent)
    logic = R.Logic(version, {"runtime": "openvino", "precision": "fp32",
                              "openvino_cache_dir": str(tmp_path)})  # fmt: skip
    assert str(logic.choice) == "openvino/fp32"
    assert str(R.Logic(version, {}).choice) == "onnxruntime/fp32"  # repositories from before
    with pytest.raises(ValueError, match="unknown runtime 'tvm'"):
        R.Logic(version, {"runtime": "tvm"})
    with pytest.raises(ValueError, match="missing inputs: token_ids"):
        logic.run({})


def test_openvino_reads_inputs_in_place_and_outputs_stay_the_callers(
    tiny_repository, graph_feeds, tmp_path
):
    """Inputs are handed to OpenVINO without a copy (a click's features: 4 ms a call): read-only
    and strided arrays give what contiguous copies give and are left as they were; an answer
    held from one run is not overwritten by the next."""
    graph = contract.PVS_DECODER
    runner = R.make_runner(
        contract.graph_path(tiny_repository, graph),
        "openvino",
        "fp32",
        threads=2,
        cache_dir=tmp_path,
    )
    plain = {k: np.array(v, copy=True) for k, v in graph_feeds[graph].items()}
    expected = runner.run(plain)
    odd = {}
    for name, value in plain.items():
        if value.ndim >= 2:  # strided: every other element of a twice-as-wide array
            wide = np.repeat(value, 2, axis=-1)[..., ::2]
            assert not wide.flags.c_contiguous and np.array_equal(wide, value)
            value = wide
        else:
            value = value.copy()
        value.flags.writeable = False
        odd[name] = value
    before = {k: v.copy() for k, v in odd.items()}
    got = runner.run(odd)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    for name, value in odd.items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    held = {k: v.copy() for k, v in got.items()}
    other = dict(plain)
    coords = contract.PVS_POINT_COORDS
    other[coords] = plain[coords] + np.float32(7.0)
    changed = runner.run(other)
    assert any(not np.array_equal(changed[k], held[k]) for k in held)  # a new answer...
    for name, value in held.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)  # ...and the old one kept

"""The runtime choice in the Triton repository: python-flavor parameters, the openvino flavor."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner
from napari_sam3.runtime.engines.local import LocalEngine

GRAPHS = (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS)


def graphs_only(tiny_repository, out):
    """A folder holding the tiny model's graphs and manifest, as `export_all` leaves it."""
    for graph in GRAPHS:
        target = contract.graph_path(out, graph)
        target.parent.mkdir(parents=True)
        shutil.copyfile(contract.graph_path(tiny_repository, graph), target)
    shutil.copyfile(tiny_repository / contract.MANIFEST_FILE, out / contract.MANIFEST_FILE)
    return contract.load_manifest(out)


def parse(path) -> pb.ModelConfig:
    """Triton's own schema: unknown fields or bad values fail to parse."""
    return text_format.Parse(path.read_text(), pb.ModelConfig())


@pytest.mark.parametrize("precision", ["auto", "fp32", "bf16"])
def test_openvino_flavor_configs_pass_tritons_schema(tiny_repository, tmp_path, precision):
    from sam3_export.triton_repo import write_repository

    manifest = graphs_only(tiny_repository, tmp_path)
    write_repository(tmp_path, manifest, flavor="openvino", device="cpu", precision=precision)
    for graph in GRAPHS:
        config = parse(tmp_path / graph / "config.pbtxt")
        assert config.backend == "openvino" and not config.platform
        assert config.default_model_filename == "model.onnx"
        assert [g.kind for g in config.instance_group] == [pb.ModelInstanceGroup.KIND_CPU]
        hinted = config.parameters["HINT_BF16"].string_value == "YES"
        expected = precision == "bf16" or (precision == "auto" and graph in onnx_runner.BF16_GRAPHS)
        assert hinted == expected, graph
        assert [i.name for i in config.input] == [
            s.name for s in onnx_runner.make_runner(contract.graph_path(tmp_path, graph),
                                                    "onnxruntime", "fp32").session.get_inputs()
        ]  # fmt: skip
    ensemble = parse(tmp_path / contract.SEGMENT / "config.pbtxt")
    assert ensemble.platform == "ensemble"


def test_the_embedded_engine_runs_the_openvino_flavor(tiny_repository, tmp_path, graph_feeds):
    from sam3_export.triton_repo import write_repository

    manifest = graphs_only(tiny_repository, tmp_path)
    write_repository(tmp_path, manifest, flavor="openvino", device="cpu")
    engine = LocalEngine(tmp_path, runtime="openvino", precision="fp32")
    reference = LocalEngine(tiny_repository, runtime="onnxruntime", precision="fp32")
    feed = graph_feeds[contract.TEXT]
    got = engine.infer(contract.TEXT, feed)[contract.TEXT_FEATURES]
    want = reference.infer(contract.TEXT, feed)[contract.TEXT_FEATURES]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    assert engine.runtime_summary().startswith("openvino fp32: encoder, text, decoder")
    assert "bf16" not in engine.runtime_summary()


@pytest.mark.auto_precision  # checks that "auto" is written and read, not what it computes
def test_python_flavor_writes_the_choice_into_the_graph_configs(tiny_repository, tmp_path):
    from sam3_export.triton_repo import write_repository

    manifest = graphs_only(tiny_repository, tmp_path)
    write_repository(tmp_path, manifest, flavor="python", device="cpu", runtime="openvino")
    for graph in GRAPHS:
        config = parse(tmp_path / graph / "config.pbtxt")
        params = {k: v.string_value for k, v in config.parameters.items()}
        assert (params["runtime"], params["precision"]) == ("openvino", "auto"), graph
        assert params["logic_module"] == "onnx_runner"
    # the server's runner reads them (what Triton's Python backend hands to Logic)
    logic = onnx_runner.Logic(str(contract.graph_path(tmp_path, contract.TEXT).parent), params)
    assert logic.choice.runtime == "openvino"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"flavor": "openvino", "device": "gpu"}, "CPU"),
        ({"flavor": "onnx", "runtime": "openvino"}, "python flavor"),
        ({"flavor": "onnx", "precision": "bf16"}, "fp32 only"),
        ({"flavor": "python", "runtime": "tvm"}, "onnxruntime, openvino, auto"),
        ({"flavor": "python", "precision": "fp16"}, "fp32, bf16, int8, auto"),
        ({"flavor": "onnx", "precision": "int8"}, "--flavor python"),
        ({"flavor": "openvino", "precision": "int8"}, "--flavor python"),
        ({"flavor": "tensorrt"}, "flavor must be one of"),
    ],
)
def test_impossible_repository_options_are_refused(tmp_path, options, message):
    from sam3_export.triton_repo import check_options

    options = {"device": "cpu", **options}
    with pytest.raises(ValueError, match=message):
        check_options(**options)

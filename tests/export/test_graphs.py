"""The exported tiny repository: valid ONNX, static shapes, the contract's names, the manifest."""

from __future__ import annotations

import onnx
import pytest

from napari_sam3 import contract

ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.BOOL: "bool",
}


def _signature(values) -> list[tuple[str, str, tuple[int, ...]]]:
    out = []
    for v in values:
        t = v.type.tensor_type
        assert all(d.HasField("dim_value") for d in t.shape.dim), f"{v.name} is not static"
        out.append((v.name, ONNX_DTYPES[t.elem_type], tuple(d.dim_value for d in t.shape.dim)))
    return out


@pytest.mark.parametrize("name", contract.GROUNDING_GRAPHS)
def test_graph_passes_full_check(tiny_repo, name):
    path = contract.graph_path(tiny_repo, name)
    assert path.is_file()
    onnx.checker.check_model(str(path), full_check=True)


@pytest.mark.parametrize("name", contract.GROUNDING_GRAPHS)
def test_graph_signature_is_the_contract(ort_repo, name):
    model = onnx.load(str(contract.graph_path(ort_repo.root, name)), load_external_data=False)
    assert model.opset_import[0].version == 18
    io = contract.graph_io(name, ort_repo.manifest)
    expected_in = [(s.name, s.dtype, s.shape) for s in io.inputs]
    expected_out = [(s.name, s.dtype, s.shape) for s in io.outputs]
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    assert _signature(inputs) == expected_in
    assert _signature(model.graph.output) == expected_out
    # fp32 graphs: no half-precision tensors anywhere
    assert not any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)


def test_manifest(ort_repo, eager):
    from sam3_export.model import model_id

    m = ort_repo.manifest
    assert m["size"] == "tiny" and m["random_weights"] is True and m["seed"] == 0
    assert m["checkpoint"] is None
    assert m["image_size"] % 14 == 0
    assert m["text_tokens"] == contract.TEXT_TOKENS
    assert m["exemplar_slots"] == contract.EXEMPLAR_SLOTS
    assert m["mask_size"] == 4 * m["image_size"] // 14
    sizes = contract.Sizes.from_manifest(m)
    assert m["vision_tensors"] == [s.as_dict() for s in contract.vision_specs(sizes)]
    # the fingerprint is a function of the weights: a fresh build with the same seed agrees
    assert m["model_id"] == model_id(eager.model)
    assert len(m["model_id"]) == 64
    for name in contract.GROUNDING_GRAPHS:
        assert m["files"][name]["bytes"] > 0


def test_manifest_is_checked(tmp_path, ort_repo):
    import json

    bad = dict(ort_repo.manifest, manifest_version=99)
    (tmp_path / contract.MANIFEST_FILE).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="manifest_version"):
        contract.load_manifest(tmp_path)
    with pytest.raises(FileNotFoundError):
        contract.load_manifest(tmp_path / "nowhere")
    config = {contract.MANIFEST_PARAMETER: json.dumps(ort_repo.manifest)}
    assert contract.manifest_from_config(config)["model_id"] == ort_repo.manifest["model_id"]


def test_seeds_give_different_weights():
    from sam3_export.model import build_sam3, model_id

    assert model_id(build_sam3("tiny", seed=1).model) != model_id(build_sam3("tiny", seed=2).model)

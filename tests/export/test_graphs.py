"""The exported tiny repository: valid ONNX, static shapes, the contract's names, the manifest."""

from __future__ import annotations

import onnx
import pytest

from napari_sam3.core import contract

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
    io = ort_repo.manifest.graph_io(name)
    expected_in = [(s.name, s.dtype, s.shape) for s in io.inputs]
    expected_out = [(s.name, s.dtype, s.shape) for s in io.outputs]
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    assert _signature(inputs) == expected_in
    assert _signature(model.graph.output) == expected_out
    # fp32 graphs: no half-precision tensors anywhere
    assert not any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)


def test_manifest(ort_repo, eager):
    from sam3_export.graphs import sizes_of
    from sam3_export.model import model_id

    m = ort_repo.manifest
    assert m.size == "tiny" and m.random_weights is True and m.seed == 0
    assert m.checkpoint is None
    assert m.image_size % 14 == 0
    assert m.sizes.text_tokens == contract.TEXT_TOKENS
    assert m.exemplar_slots == contract.EXEMPLAR_SLOTS
    assert m.mask_size == 4 * m.image_size // 14 == m.pvs_mask_input_size
    assert m.sizes == sizes_of(eager.build)
    data = m.as_dict()
    assert data["vision_tensors"] == [s.as_dict() for s in contract.vision_specs(m.sizes)]
    # the fingerprint is a function of the weights: a fresh build with the same seed agrees
    assert m.model_id == model_id(eager.model)
    assert len(m.model_id) == 64
    for name in contract.GROUNDING_GRAPHS:
        assert m.files[name]["bytes"] > 0


def test_manifest_is_checked(tmp_path, ort_repo):
    import json

    good = ort_repo.manifest.as_dict()
    path = tmp_path / contract.MANIFEST_FILE
    bad_entries = {
        "manifest_version": (99, "manifest_version"),
        "image_size": ("112", "'image_size' must be a non-negative integer"),
        "d_model": (None, "'d_model' must be"),
        "random_weights": ("yes", "'random_weights' must be a bool"),
        "mask_size": (33, "'mask_size' 33"),
        "patch_size": (15, "not a multiple of patch_size 15"),
        "pvs_points": (True, "'pvs_points'"),
    }
    for key, (value, message) in bad_entries.items():
        path.write_text(json.dumps({**good, key: value}))
        with pytest.raises(ValueError, match=message) as info:
            contract.load_manifest(tmp_path)
        assert str(path) in str(info.value)
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "model_id"}))
    with pytest.raises(ValueError, match="lacks the field 'model_id'"):
        contract.load_manifest(tmp_path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        contract.load_manifest(tmp_path)
    with pytest.raises(FileNotFoundError):
        contract.load_manifest(tmp_path / "nowhere")
    config = {contract.MANIFEST_PARAMETER: json.dumps(good)}
    assert contract.manifest_from_config(config) == ort_repo.manifest
    with pytest.raises(ValueError, match="not valid JSON"):
        contract.manifest_from_config({contract.MANIFEST_PARAMETER: "{"})


def test_seeds_give_different_weights():
    from sam3_export.model import build_sam3, model_id

    assert model_id(build_sam3("tiny", seed=1).model) != model_id(build_sam3("tiny", seed=2).model)

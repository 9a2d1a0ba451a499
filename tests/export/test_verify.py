"""`sam3-export --verify`: each graph and precision against the PyTorch model of the same random
weights, through the library's pipeline; a damaged graph fails with the measured difference."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner as R
from sam3_export import verify as V
from sam3_export.cli import main
from sam3_export.verdicts import violations


@pytest.fixture(scope="module")
def verified(tiny_repository, tmp_path_factory):
    """A copy of the tiny repository, verified by the command line (1 thread)."""
    root = tmp_path_factory.mktemp("verified") / "repo"
    shutil.copytree(tiny_repository, root, symlinks=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--verify", str(root), "--threads", "1"])
    lines = out.getvalue().splitlines()
    assert code == 0, lines
    return root, lines


def test_the_report_holds_every_graph_and_precision_with_honest_verdicts(verified):
    root, lines = verified
    report = json.loads((root / R.VERIFICATION_FILE).read_text())
    assert report["checkpoint"] == "random weights seed 0"
    assert report["model_id"] == contract.load_manifest(root).model_id
    assert report["images"] and all(len(i["sha256"]) == 64 for i in report["images"])
    graphs = [g for g in R.SHORT_NAMES if contract.graph_path(root, g).is_file()]
    assert sorted(report["graphs"]) == sorted(graphs)
    for graph in graphs:
        entries = report["graphs"][graph]["precisions"]
        assert set(entries) == set(R.REPORT_PRECISIONS)
        # one line per graph and precision run, the verdict in it
        assert any(line.startswith(f"sam3-export: verify {graph} fp32: ") for line in lines)
        for precision in R.available_precisions(contract.graph_path(root, graph).parent):
            entry = entries[precision]
            broken = [v for row in entry["comparisons"] for v in violations(row)]
            # the verdict is what the measured figures say against the bounds
            assert entry["verdict"] == (R.FAILS if broken else R.HOLDS), (graph, precision)
        # fp32 against the PyTorch model: within float noise, so it holds
        assert entries["fp32"]["verdict"] == R.HOLDS, entries["fp32"]["reason"]
        worst = entries["fp32"]["measured"].get("max |d score|", 0.0)
        assert worst < 1e-4
        # bf16 computes as named: further from the PyTorch model than fp32 noise
        bf16 = entries["bf16"]["measured"]
        assert max(bf16.get("max |d score|", 0), bf16.get("max |d predicted IoU|", 0)) > 1e-4
        assert entries["int8"]["verdict"] == R.NOT_RUN
    summary = (root / R.VERIFICATION_SUMMARY).read_text()
    assert all(f"| {graph} | fp32 | holds |" in summary for graph in graphs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = R.load_verification(root)
    assert found is not None and found.holding(contract.ENCODER) >= {"fp32"}


def _scale_largest_weight(path, factor: float) -> str:
    model = onnx.load(str(path))
    weights = [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
    largest = max(weights, key=lambda i: np.prod(i.dims))
    scaled = numpy_helper.to_array(largest) * np.float32(factor)
    largest.CopyFrom(numpy_helper.from_array(scaled, largest.name))
    onnx.save(model, str(path))
    return largest.name


def test_a_damaged_graph_fails_with_the_measured_difference(verified, tmp_path):
    root = tmp_path / "damaged"
    shutil.copytree(verified[0], root, symlinks=True)
    _scale_largest_weight(contract.graph_path(root, contract.DECODER), 3.0)
    # the old report no longer describes these graph files: auto ignores it, and says so
    with pytest.warns(R.VerificationIgnored, match="sam3_decoder: made for other graph files"):
        assert R.load_verification(root) is None
    report = V.verify(
        root, threads=1, graphs=(contract.DECODER,), precisions=("fp32",), progress=lambda _: None
    )
    entry = report["graphs"][contract.DECODER]["precisions"]["fp32"]
    assert entry["verdict"] == R.FAILS
    measured = entry["measured"]
    assert (
        measured["max |d score|"] > R.PARITY_BOUNDS["score"]
        or measured["min mask IoU"] < (R.PARITY_BOUNDS["mask_iou"])
    ), measured
    assert "sam3_decoder" in entry["reason"]
    assert report["graphs"][contract.DECODER]["precisions"]["bf16"]["verdict"] == R.NOT_RUN
    found = R.load_verification(root)
    assert found is not None and "fp32" not in found.holding(contract.DECODER)


def test_verify_images_are_checked_before_anything_runs(verified, tmp_path, capsys):
    root = verified[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--verify", str(root), "--verify-images", str(empty)]) == 2
    assert "holds no image" in capsys.readouterr().err
    (empty / "blank.png").write_bytes(b"")
    assert main(["--verify", str(root), "--verify-images", str(empty)]) == 2
    assert "blank.png is empty" in capsys.readouterr().err
    (empty / "blank.png").write_bytes(b"not a png at all")
    assert main(["--verify", str(root), "--verify-images", str(empty)]) == 1
    assert "blank.png cannot be read as an image" in capsys.readouterr().err


def test_a_checkpoint_repository_needs_its_checkpoint(verified, tmp_path, capsys):
    root = tmp_path / "from_checkpoint"
    shutil.copytree(verified[0], root, symlinks=True)
    manifest = json.loads((root / contract.MANIFEST_FILE).read_text())
    manifest.update(random_weights=False, seed=None, checkpoint="sam3.pt")
    (root / contract.MANIFEST_FILE).write_text(json.dumps(manifest))
    assert main(["--verify", str(root)]) == 2
    assert "--checkpoint FILE" in capsys.readouterr().err

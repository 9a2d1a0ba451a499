"""`sam3-serve` refuses a repository it cannot serve, naming the model and the problem."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from napari_sam3.core import contract
from napari_sam3.serving.ports import free_port
from napari_sam3.serving.repository_check import RepositoryError, check_repository

from .._required import require, require_tritonserver


def _serve(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "napari_sam3.serving.command", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _refused(result: subprocess.CompletedProcess) -> str:
    """The one line a refused start prints (exit 2, no traceback)."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "ready" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def repo(tiny_repository, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_repository, tmp_path / "repo"))


def _with_external_data(repo: Path, name: str) -> Path:
    """Re-save one graph with its weights as external data, recording the size as an export does."""
    onnx = require("onnx")
    graph = contract.graph_path(repo, name)
    model = onnx.load(str(graph))
    onnx.save_model(
        model, str(graph), save_as_external_data=True, location="model.onnx.data", size_threshold=0
    )
    data = graph.with_name("model.onnx.data")
    manifest_path = repo / contract.MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][name]["bytes"] = graph.stat().st_size + data.stat().st_size
    manifest_path.write_text(json.dumps(manifest))
    return data


def test_the_exported_repository_passes(repo):
    models = check_repository(repo)
    assert set(models) >= {contract.SEGMENT, contract.ENCODER, contract.POSTPROCESS}
    assert models[contract.SEGMENT].backend == "ensemble"
    assert contract.POSTPROCESS in models[contract.SEGMENT].steps
    _with_external_data(repo, contract.TEXT)
    check_repository(repo)  # external data of the recorded size is fine


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path):
    line = _refused(_serve(tmp_path / "no-such-repository"))
    assert "no-such-repository" in line and "not a folder" in line


def test_a_repository_without_models_is_refused(repo):
    for folder in repo.iterdir():
        if folder.is_dir():
            shutil.rmtree(folder)
    line = _refused(_serve(repo, "--grpc-port", free_port(), "--http-port", free_port()))
    assert "no models" in line


def _corrupt_config(repo: Path) -> str:
    (repo / contract.DECODER / "config.pbtxt").write_text('name: "sam3_decoder"\ninput { name: ')
    return "sam3_decoder: config.pbtxt does not parse"


def _truncate_graph(repo: Path) -> str:
    graph = contract.graph_path(repo, contract.DECODER)
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    return "sam3_decoder: model.onnx in .* bytes but the export wrote"


def _truncate_external_data(repo: Path) -> str:
    data = _with_external_data(repo, contract.TEXT)
    data.write_bytes(data.read_bytes()[:-4096])
    return "sam3_text: model.onnx \\+ model.onnx.data in .* bytes but the export wrote"


def _remove_model_py(repo: Path) -> str:
    (repo / contract.POSTPROCESS / "1" / "model.py").unlink()
    return "sam3_postprocess: .*model.py is missing"


def _remove_step_model(repo: Path) -> str:
    shutil.rmtree(repo / contract.POSTPROCESS)
    return "model sam3_segment(_concept)?: its ensemble step 'sam3_postprocess' is not in"


def _remove_graph_model(repo: Path) -> str:
    shutil.rmtree(repo / contract.PVS_DECODER)
    return "sam3_pvs_decoder: exported .* but its folder is missing"


def _remove_version_folder(repo: Path) -> str:
    shutil.rmtree(repo / contract.SEGMENT / "1")
    return "sam3_segment: no version folder"


def _rename_in_config(repo: Path) -> str:
    config = repo / contract.TEXT / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "sam3_text"', 'name: "other"', 1))
    return "sam3_text: config.pbtxt names it 'other'"


@pytest.mark.parametrize(
    "damage",
    [
        _corrupt_config,
        _truncate_graph,
        _truncate_external_data,
        _remove_model_py,
        _remove_step_model,
        _remove_graph_model,
        _remove_version_folder,
        _rename_in_config,
    ],
)
def test_a_damaged_repository_is_refused_naming_the_model(repo, damage):
    expected = damage(repo)
    with pytest.raises(RepositoryError, match=expected):
        check_repository(repo)
    line = _refused(_serve(repo, "--grpc-port", free_port(), "--http-port", free_port()))
    assert re.search(expected, line), line


@pytest.mark.needs_tritonserver
def test_a_failed_load_prints_the_model_and_tritons_reason(repo):
    # a file of the model's code missing: the repository check passes, Triton's load fails
    (repo / contract.POSTPROCESS / "1" / "rle.py").unlink()
    result = _serve(repo, "--grpc-port", free_port(), "--http-port", free_port(), timeout=300)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "ready" not in result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert any("sam3_postprocess:" in s and "No module named 'rle'" in s for s in lines), lines
    # The ensembles that use it are named too, with why.
    assert any("sam3_segment: not loaded (needs sam3_postprocess)" in s for s in lines), lines


@pytest.mark.needs_tritonserver
def test_an_onnx_flavor_repository_is_refused_by_the_python_only_server(repo, monkeypatch):
    # About nvidia-pytriton's server, which has only the Python backend: hide any other on PATH.
    require_tritonserver(bundled_only=True)
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "tritonserver").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    config = repo / contract.TEXT / "config.pbtxt"
    config.write_text(
        config.read_text().replace('backend: "python"', 'platform: "onnxruntime_onnx"')
    )
    line = _refused(_serve(repo, "--grpc-port", free_port(), "--http-port", free_port()))
    assert "sam3_text needs the onnxruntime backend" in line and "--flavor python" in line

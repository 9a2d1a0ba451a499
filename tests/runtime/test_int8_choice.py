"""precision="int8": where it may run (fed hosts: AVX2 only, VNNI, AMX, no OpenVINO, no AVX2),
the refusals, and the INT8 IR's checks (its record's sizes and hashes, the manifest's listing,
OpenVINO compiling it without any int8 operation). The IRs here are written by OpenVINO alone
(no quantizer: tests/export/test_int8.py quantizes), so this runs in every environment."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from napari_sam3.core import contract
from napari_sam3.core.errors import BadData
from napari_sam3.runtime import host as H
from napari_sam3.runtime import onnx_runner as R
from napari_sam3.serving.repository_check import RepositoryError, check_repository

ENCODER = contract.ENCODER


@pytest.fixture
def int8_hosts(hosts):
    """The described AVX2-only host, and the same with VNNI, with AMX, without OpenVINO,
    without AVX2, and with an OpenVINO that does not list INT8."""
    avx2 = hosts["avx2"]
    assert "avx2" in avx2.cpu_flags and "INT8" in avx2.openvino_capabilities
    return {
        "avx2": avx2,
        "vnni": dataclasses.replace(avx2, cpu_flags=avx2.cpu_flags | {"avx_vnni"}),
        "amx": dataclasses.replace(avx2, cpu_flags=avx2.cpu_flags | {"amx_tile", "amx_int8"}),
        "no_openvino": dataclasses.replace(avx2, openvino_version=None, openvino_capabilities=()),
        "no_avx2": dataclasses.replace(avx2, cpu_flags=avx2.cpu_flags - {"avx2"}),
        "no_int8_listed": dataclasses.replace(
            avx2, openvino_capabilities=tuple(c for c in avx2.openvino_capabilities if c != "INT8")
        ),
    }


@pytest.mark.parametrize(
    ("name", "able", "says"),
    [
        ("avx2", True, "AVX2 (no VNNI or AMX"),
        ("vnni", True, "VNNI"),
        ("amx", True, "AMX"),
        ("no_openvino", False, "OpenVINO is not installed"),
        ("no_avx2", False, "no AVX2"),
        ("no_int8_listed", False, "does not list INT8"),
    ],
)
def test_where_int8_runs(int8_hosts, name, able, says):
    host = int8_hosts[name]
    assert host.int8() == (able, host.int8()[1]) and says in host.int8()[1]
    assert f"int8: {'yes' if able else 'no'}" in host.describe()
    if able:
        choice = R.choose(ENCODER, "openvino", "int8", host, int8_file=True)
        assert (choice.runtime, choice.precision, choice.asked) == ("openvino", "int8", "int8")
        assert says in choice.reason
    else:
        with pytest.raises(R.PrecisionUnavailable, match="precision='fp32'"):
            R.choose(ENCODER, "auto", "int8", host, int8_file=True)


@pytest.mark.parametrize("name", ["avx2", "vnni", "amx"])
def test_auto_never_picks_int8_by_itself(int8_hosts, name):
    for runtime in ("auto", "openvino"):
        choice = R.choose(ENCODER, runtime, "auto", int8_hosts[name], int8_file=True)
        assert choice.precision != "int8"


def test_explicit_int8_refusals_say_what_to_do(int8_hosts):
    vnni = int8_hosts["vnni"]
    with pytest.raises(R.PrecisionUnavailable, match="runtime='openvino'"):
        R.choose(ENCODER, "onnxruntime", "int8", vnni, int8_file=True)
    with pytest.raises(R.PrecisionUnavailable, match="pip install openvino"):
        R.choose(ENCODER, "auto", "int8", int8_hosts["no_openvino"], int8_file=True)
    with pytest.raises(R.PrecisionUnavailable, match="sam3-export --quantize"):
        R.choose(ENCODER, "openvino", "int8", vnni, int8_file=False)
    cuda = dataclasses.replace(vnni, ort_providers=(H.CUDA_PROVIDER, H.CPU_PROVIDER))
    assert R.choose(ENCODER, "auto", "int8", cuda, int8_file=True).runtime == "openvino"


def _int8_copy(tiny_repository, tmp_path, graphs=(ENCODER,)):
    """A copy of the tiny repository with an IR of each of `graphs` where the INT8 IR goes (the
    fp32 graph saved by OpenVINO, its record and manifest entry written as the quantizer does)."""
    ov = H.import_openvino()
    repo = tmp_path / "repo"
    shutil.copytree(tiny_repository, repo)
    entries = {}
    for graph in graphs:
        version = repo / graph / "1"
        xml = R.int8_path(version)
        xml.parent.mkdir()
        ov.save_model(ov.Core().read_model(str(version / "model.onnx")), str(xml), False)
        files = {n: R.file_record(p) for n, p in R.int8_files(xml).items()}
        (xml.parent / R.INT8_RECORD).write_text(json.dumps({"files": files}))
        entries[graph] = {"files": files}
    manifest = contract.load_manifest(repo).with_entries(int8=entries)
    (repo / contract.MANIFEST_FILE).write_text(json.dumps(manifest.as_dict()))
    return repo


def test_int8_applies_to_the_graphs_with_an_ir(tiny_repository, tmp_path, int8_hosts):
    repo = _int8_copy(tiny_repository, tmp_path)
    graphs = {g: repo / g / "1" for g in (ENCODER, contract.TEXT, contract.DECODER)}
    choices = R.choose_repository(graphs, "openvino", "int8", int8_hosts["avx2"])
    assert (choices[ENCODER].precision, choices[ENCODER].asked) == ("int8", "int8")
    for graph in (contract.TEXT, contract.DECODER):
        assert (choices[graph].precision, choices[graph].asked) == ("fp32", "auto")
        assert "no INT8 file: as auto" in choices[graph].reason
    assert R.summary(choices).startswith("openvino int8: encoder; fp32: text, decoder")
    bare = {g: tiny_repository / g / "1" for g in graphs}
    with pytest.raises(R.PrecisionUnavailable, match="no graph of this repository"):
        R.choose_repository(bare, "openvino", "int8", int8_hosts["avx2"])


def test_an_ir_without_int8_operations_is_refused(tiny_repository, tmp_path, avx2_host):
    """The checks of a compiled INT8 graph: an fp32 IR in the INT8 place compiles with no int8
    matrix product, and explicit int8 refuses it rather than run fp32 under its name."""
    repo = _int8_copy(tiny_repository, tmp_path)
    path = contract.graph_path(repo, ENCODER)
    with pytest.raises(R.PrecisionUnavailable, match="no int8 operation"):
        R.make_runner(path, "openvino", "int8", cache_dir=tmp_path / "cache")


def test_a_damaged_ir_is_refused(tiny_repository, tmp_path, avx2_host):
    repo = _int8_copy(tiny_repository, tmp_path)
    version = repo / ENCODER / "1"
    check_repository(repo)  # as written: accepted
    assert R.check_int8(version, hashes=True) == R.int8_path(version)
    weights = R.int8_path(version).with_suffix(".bin")
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    weights.write_bytes(bytes(data))
    R.check_int8(version)  # sizes alone do not see it
    with pytest.raises(BadData, match="sha256"):
        R.check_int8(version, hashes=True)
    with pytest.raises(RepositoryError, match=f"model {ENCODER}: .*sha256"):
        check_repository(repo)
    with pytest.raises(BadData, match="sha256"):  # compiled from the file: hashed first
        R.make_runner(contract.graph_path(repo, ENCODER), "openvino", "int8", cache_dir=tmp_path)
    weights.write_bytes(bytes(data[:-8]))
    with pytest.raises(BadData, match="truncated or replaced"):
        R.check_int8(version)
    shutil.rmtree(R.int8_path(version).parent)  # listed in the manifest, but gone
    with pytest.raises(RepositoryError, match="missing"):
        check_repository(repo)


def test_the_int8_ir_has_its_own_compiled_cache_folder(tiny_repository, tmp_path):
    repo = _int8_copy(tiny_repository, tmp_path)
    version = repo / ENCODER / "1"
    xml = R.int8_path(version)
    before = R._graph_signature(xml)
    assert before != R._graph_signature(version / "model.onnx")
    weights = xml.with_suffix(".bin")
    weights.write_bytes(weights.read_bytes() + b"\0")  # the weights change, the xml does not
    assert R._graph_signature(xml) != before


def test_auto_takes_int8_only_where_the_report_holds_it(int8_hosts, tmp_path):
    """Under `auto`, int8 comes only from a verification report whose int8 verdict holds for
    the graph, on a host that runs int8, for a graph with its INT8 IR; otherwise not."""
    report = tmp_path / R.VERIFICATION_FILE
    holds = R.Verification(report, {ENCODER: {"fp32": "holds", "bf16": "holds", "int8": "holds"}})
    fails = R.Verification(report, {ENCODER: {"fp32": "holds", "bf16": "holds", "int8": "fails"}})
    vnni = int8_hosts["vnni"]
    picked = R.choose(ENCODER, "auto", "auto", vnni, holds, int8_file=True)
    assert (picked.runtime, picked.precision, picked.asked) == ("openvino", "int8", "auto")
    assert "int8 holds in VERIFICATION.md (INT8 on VNNI)" in picked.reason
    no_ir = R.choose(ENCODER, "auto", "auto", vnni, holds, int8_file=False)
    assert no_ir.precision == "fp32" and "no INT8 IR" in no_ir.reason
    assert R.choose(ENCODER, "auto", "auto", vnni, fails, int8_file=True).precision == "fp32"
    for name in ("no_avx2", "no_int8_listed"):
        assert (
            R.choose(ENCODER, "auto", "auto", int8_hosts[name], holds, int8_file=True).precision
            != "int8"
        )
    without = R.choose(ENCODER, "auto", "auto", int8_hosts["no_openvino"], holds, int8_file=True)
    assert (without.runtime, without.precision) == ("onnxruntime", "fp32")
    assert R.choose(ENCODER, "openvino", "auto", vnni, None, int8_file=True).precision == "fp32"


@pytest.mark.parametrize(("name", "rest"), [("avx2", "fp32"), ("native_bf16", "bf16")])
def test_an_int8_graph_computes_its_floating_point_rest_as_the_host_does_best(
    hosts, monkeypatch, name, rest
):
    """The operations an INT8 IR leaves in floating point run in bf16 where the CPU has it
    natively (faster than the bf16 encoder at full size), else in fp32; fp32 and bf16 graphs
    keep their own hint."""
    monkeypatch.setattr(H, "detect", lambda: hosts[name])
    assert R.int8_rest() == rest == R.int8_rest(hosts[name])
    hint = {"fp32": "f32", "bf16": "bf16"}
    assert R._ov_config("int8", 2)["INFERENCE_PRECISION_HINT"] == hint[rest]
    assert R._ov_config("fp32", 2)["INFERENCE_PRECISION_HINT"] == "f32"
    assert R._ov_config("bf16", 2)["INFERENCE_PRECISION_HINT"] == "bf16"

"""Which runtime and precision a graph runs at, on either kind of CPU, and the errors for
choices that cannot run. Every decision is fed a described host (tests/conftest.py HOSTS) and
OpenVINO's real type objects, so both sides of each branch run on any machine."""

from __future__ import annotations

import dataclasses

import pytest

from napari_sam3.core import contract
from napari_sam3.runtime import host as H
from napari_sam3.runtime import onnx_runner as R

ov = H.import_openvino()


@pytest.fixture
def avx2(hosts):
    return hosts["avx2"]


@pytest.fixture
def bf16_host(hosts):
    return hosts["native_bf16"]


@pytest.mark.parametrize(
    ("runtime", "precision", "named"),
    [("tensorrt", "fp32", "runtime"), ("openvino", "fp16", "precision"), ("", "auto", "runtime")],
)
def test_unknown_runtime_or_precision_lists_the_choices(runtime, precision, named, avx2):
    with pytest.raises(ValueError, match=f"unknown {named}") as info:
        R.choose("sam3_text", runtime, precision, avx2)
    choices = (*R.RUNTIMES, "auto") if named == "runtime" else (*R.PRECISIONS, "auto")
    for choice in choices:
        assert choice in str(info.value)


def test_explicit_bf16_without_native_support_is_refused_not_downgraded(avx2, bf16_host):
    with pytest.raises(R.PrecisionUnavailable, match="silently compute fp32") as info:
        R.choose("sam3_text", "openvino", "bf16", avx2)
    assert "avx512_bf16" in str(info.value) and "precision='fp32'" in str(info.value)
    with pytest.raises(R.PrecisionUnavailable, match="runtime='openvino'"):
        R.choose("sam3_text", "onnxruntime", "bf16", bf16_host)
    explicit = R.choose("sam3_text", "openvino", "bf16", bf16_host)
    assert (explicit.precision, explicit.asked) == ("bf16", "bf16")


@pytest.mark.parametrize("name", ["avx2", "native_bf16"])
def test_auto_precision_on_either_cpu(name, hosts):
    host = hosts[name]
    choice = R.choose("sam3_unified_encoder", "openvino", "auto", host)
    assert choice.runtime == "openvino" and choice.asked == "auto"
    if name == "native_bf16":
        assert choice.precision == "bf16" and "native bf16" in choice.reason
    else:
        assert choice.precision == "fp32" and "no native bf16" in choice.reason


def test_native_bf16_needs_the_flag_and_openvino_to_agree(avx2, bf16_host):
    assert bf16_host.native_bf16()[0] and not avx2.native_bf16()[0]
    flag_only = dataclasses.replace(bf16_host, openvino_capabilities=avx2.openvino_capabilities)
    native, why = flag_only.native_bf16()
    assert not native and "OpenVINO does not list BF16" in why
    no_openvino = dataclasses.replace(bf16_host, openvino_version=None, openvino_capabilities=())
    assert not no_openvino.native_bf16()[0] and "not installed" in no_openvino.native_bf16()[1]
    amx = dataclasses.replace(avx2, cpu_flags=avx2.cpu_flags | {"amx_bf16", "amx_tile"})
    amx = dataclasses.replace(amx, openvino_capabilities=bf16_host.openvino_capabilities)
    assert amx.native_bf16()[0] and amx.amx and not avx2.amx
    assert bf16_host.vnni and not avx2.vnni


def test_auto_keeps_graphs_not_measured_in_bf16_at_fp32(monkeypatch, bf16_host):
    monkeypatch.setattr(R, "BF16_GRAPHS", frozenset({"sam3_unified_encoder"}))
    choice = R.choose("sam3_decoder", "openvino", "auto", bf16_host)
    assert choice.precision == "fp32" and "not measured to hold in bf16" in choice.reason
    assert R.choose("sam3_unified_encoder", "openvino", "auto", bf16_host).precision == "bf16"


@pytest.mark.parametrize(
    ("openvino", "cuda", "runtime", "why"),
    [
        (True, False, "openvino", "OpenVINO"),
        (False, False, "onnxruntime", "not installed"),
        (True, True, "onnxruntime", "CUDA"),
    ],
)
def test_auto_runtime(openvino, cuda, runtime, why, bf16_host):
    host = dataclasses.replace(
        bf16_host,
        openvino_version=bf16_host.openvino_version if openvino else None,
        ort_providers=(H.CUDA_PROVIDER, H.CPU_PROVIDER) if cuda else (H.CPU_PROVIDER,),
    )
    choice = R.choose("sam3_text", host=host)
    assert choice.runtime == runtime and why in choice.reason
    assert choice.precision == ("bf16" if runtime == "openvino" else "fp32")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    flags = H.read_cpu_flags(cpuinfo)
    assert {"avx2", "avx512f", "avx512_bf16"} <= flags
    assert H.read_cpu_flags(tmp_path / "missing") == frozenset()


def test_this_machine_is_read_once_with_real_values():
    host = H.detect()
    assert host is H.detect()
    assert host.openvino and "FP32" in host.openvino_capabilities
    assert H.CPU_PROVIDER in host.ort_providers
    if not host.cpu_flags & {"avx512_bf16", "amx_bf16"}:
        assert not host.native_bf16()[0]
    assert "OpenVINO: 2026" in host.describe()


# -- after compiling: OpenVINO answers type objects -------------------------------------------
def _planned(precision: str, asked: str = "auto") -> R.Choice:
    return R.Choice("openvino", precision, "planned", asked)


def test_compiled_precision_compares_openvino_types_not_text():
    assert str(ov.Type.bf16) != "bf16"  # "<Type: 'bfloat16'>": why text comparison failed
    assert R.compiled_precision(ov.Type.bf16) == "bf16"
    assert R.compiled_precision(ov.Type.f32) == "fp32"
    assert R.compiled_precision(ov.Type.f16) == "f16"


def test_a_compile_that_holds_keeps_the_choice():
    for precision, reported in (("bf16", ov.Type.bf16), ("fp32", ov.Type.f32)):
        for asked in ("auto", precision):
            choice = _planned(precision, asked)
            assert R.verify_precision(choice, reported, "g") is choice


def test_auto_runs_what_openvino_compiled_and_says_so():
    choice = R.verify_precision(_planned("bf16"), ov.Type.f32, "sam3_text")
    assert choice.precision == "fp32" and "OpenVINO compiled it at fp32" in choice.reason


def test_explicit_bf16_that_openvino_compiled_at_fp32_is_an_error():
    with pytest.raises(R.PrecisionUnavailable, match="precision='fp32'") as info:
        R.verify_precision(_planned("bf16", "bf16"), ov.Type.f32, "sam3_text")
    assert "compiled sam3_text at fp32" in str(info.value)


class _CoreRefusingBf16:
    """OpenVINO's Core, except that a bf16 compile fails (as on a plugin that cannot)."""

    def __init__(self):
        self.core = ov.Core()
        self.hints = []

    def compile_model(self, path, device, config):
        self.hints.append(config["INFERENCE_PRECISION_HINT"])
        if config["INFERENCE_PRECISION_HINT"] == "bf16":
            raise RuntimeError("Exception from src/plugin.cpp:1:\nbf16 is not supported here")
        return self.core.compile_model(path, device, config)


def test_auto_falls_back_to_fp32_when_bf16_fails_to_compile(tiny_repository):
    path = str(contract.graph_path(tiny_repository, contract.TEXT))
    core = _CoreRefusingBf16()
    compiled, choice = R.compile_openvino(core, path, _planned("bf16"), graph="sam3_text")
    assert core.hints == ["bf16", "f32"]
    assert choice.precision == "fp32" and "bf16 is not supported here" in choice.reason
    assert R.compiled_precision(compiled.get_property("INFERENCE_PRECISION_HINT")) == "fp32"
    with pytest.raises(RuntimeError, match="not supported"):
        R.compile_openvino(_CoreRefusingBf16(), path, _planned("bf16", "bf16"))


def test_a_real_compile_reports_what_it_runs_at(tiny_repository, tmp_path, any_host):
    """On this machine, whichever host the decision was told: the runner's choice is what
    OpenVINO compiled, and auto never fails."""
    path = contract.graph_path(tiny_repository, contract.ENCODER)
    runner = R.make_runner(path, "openvino", "auto", cache_dir=tmp_path)
    reported = R.compiled_precision(runner.compiled.get_property("INFERENCE_PRECISION_HINT"))
    assert runner.choice.precision == reported


# -- the one-line summary ----------------------------------------------------------------------
def test_the_summary_is_one_short_line_per_distinct_choice(avx2, bf16_host, monkeypatch):
    # a mix of bf16 and fp32 graphs (as auto chose before the heads were measured)
    monkeypatch.setattr(
        R, "BF16_GRAPHS", frozenset({*contract.PVS_GRAPHS, contract.ENCODER, contract.TEXT})
    )
    choices = {g: R.choose(g, "openvino", "auto", bf16_host) for g in contract.GROUNDING_GRAPHS}
    choices |= {g: R.choose(g, "openvino", "auto", bf16_host) for g in contract.PVS_GRAPHS}
    line = R.summary(choices)
    assert line.startswith("openvino bf16: encoder, text, PVS; fp32: decoder")
    assert line.endswith("(rule: docs/serving.md#precision)") and "\n" not in line
    assert len(line) < 120
    why = R.reasons(choices)
    assert why.count("native bf16") == 1  # each reason once, not once per graph
    mixed = {"sam3_text": R.choose("sam3_text", "onnxruntime", "auto", avx2)}
    mixed["sam3_unified_encoder"] = R.choose("sam3_unified_encoder", "openvino", "fp32", avx2)
    assert R.summary(mixed).startswith("onnxruntime fp32: text; openvino fp32: encoder")


@pytest.mark.parametrize("name", ["avx2", "native_bf16"])
def test_onnxruntime_puts_its_cuda_provider_first_only_where_installed(name, hosts, monkeypatch):
    host = hosts[name]
    monkeypatch.setattr(H, "detect", lambda: host)
    assert R._ort_providers() == [H.CPU_PROVIDER]
    with_cuda = dataclasses.replace(host, ort_providers=(H.CPU_PROVIDER, H.CUDA_PROVIDER))
    monkeypatch.setattr(H, "detect", lambda: with_cuda)
    assert R._ort_providers() == [H.CUDA_PROVIDER, H.CPU_PROVIDER]
    assert R.choose("sam3_text", host=with_cuda).runtime == "onnxruntime"


# -- auto through the embedded engine, as each kind of machine --------------------------------
def test_the_engine_plans_auto_for_the_host_and_runs_what_compiled(
    tiny_repository, s2_crop, any_host
):
    """The plan is the host's (bf16 for the measured graphs where native, fp32 elsewhere) and is
    said in the summary; a prompt then runs on this machine whatever it is: each graph at its
    plan, or at fp32 with OpenVINO's reason where this CPU compiled the bf16 plan at fp32."""
    from napari_sam3 import Sam3Client

    native = any_host.native_bf16()[0]
    with Sam3Client.local(tiny_repository) as client:
        plan = dict(client.engine.choices)
        assert set(plan) == {*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS}
        for graph, choice in plan.items():
            wanted = "bf16" if native and graph in R.BF16_GRAPHS else "fp32"
            assert (choice.runtime, choice.precision, choice.asked) == ("openvino", wanted, "auto")
        line = client.engine.runtime_summary()
        assert line.startswith("openvino bf16: " if native else "openvino fp32: "), line
        frame = client.segment(s2_crop, "field", score_thr=0.0, dedup=None)
        assert len(frame) == client.manifest.num_queries
        ran = {g: client.engine.choices[g] for g in client.engine.loaded_graphs()}
    assert set(ran) == {contract.ENCODER, contract.TEXT, contract.DECODER}
    for graph, choice in ran.items():
        held = choice.precision == plan[graph].precision
        assert held or "OpenVINO compiled it at fp32" in choice.reason, (graph, choice)

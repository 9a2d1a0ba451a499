"""Which runtime and precision a graph runs at, and the errors for choices that cannot run."""

from __future__ import annotations

import pytest

from napari_sam3.triton_models import onnx_runner as R

NATIVE = (True, "CPU flags avx512_bf16")
NOT_NATIVE = (False, "this CPU has neither AVX512_BF16 nor AMX")


@pytest.mark.parametrize(
    ("runtime", "precision", "named"),
    [("tensorrt", "fp32", "runtime"), ("openvino", "fp16", "precision"), ("", "auto", "runtime")],
)
def test_unknown_runtime_or_precision_lists_the_choices(runtime, precision, named):
    with pytest.raises(ValueError, match=f"unknown {named}") as info:
        R.choose("sam3_text", runtime, precision)
    choices = (*R.RUNTIMES, "auto") if named == "runtime" else (*R.PRECISIONS, "auto")
    for choice in choices:
        assert choice in str(info.value)


def test_explicit_bf16_without_native_support_is_refused_not_downgraded():
    with pytest.raises(R.PrecisionUnavailable, match="silently compute fp32") as info:
        R.choose("sam3_text", "openvino", "bf16", bf16=NOT_NATIVE)
    assert "AVX512_BF16" in str(info.value) and "precision='fp32'" in str(info.value)
    with pytest.raises(R.PrecisionUnavailable, match="runtime='openvino'"):
        R.choose("sam3_text", "onnxruntime", "bf16", bf16=NATIVE)


def test_auto_precision_falls_back_and_says_why():
    choice = R.choose("sam3_unified_encoder", "openvino", "auto", bf16=NOT_NATIVE)
    assert (choice.runtime, choice.precision) == ("openvino", "fp32")
    assert "AVX512_BF16" in choice.reason
    choice = R.choose("sam3_unified_encoder", "openvino", "auto", bf16=NATIVE)
    assert (choice.runtime, choice.precision) == ("openvino", "bf16")
    assert str(choice) == "openvino/bf16"


def test_auto_keeps_graphs_not_measured_in_bf16_at_fp32(monkeypatch):
    monkeypatch.setattr(R, "BF16_GRAPHS", frozenset({"sam3_unified_encoder"}))
    choice = R.choose("sam3_decoder", "openvino", "auto", bf16=NATIVE)
    assert choice.precision == "fp32" and "sam3_decoder" in choice.reason
    assert R.choose("sam3_unified_encoder", "openvino", "auto", bf16=NATIVE).precision == "bf16"


@pytest.mark.parametrize(
    ("openvino", "cuda", "runtime", "why"),
    [
        (True, False, "openvino", "OpenVINO"),
        (False, False, "onnxruntime", "not installed"),
        (True, True, "onnxruntime", "CUDA"),
    ],
)
def test_auto_runtime(openvino, cuda, runtime, why):
    choice = R.choose("sam3_text", bf16=NOT_NATIVE, openvino_installed=openvino, cuda=cuda)
    assert choice.runtime == runtime and why in choice.reason
    assert choice.precision == "fp32"


def test_cpu_flags_and_native_bf16(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n")
    flags = R.cpu_flags(cpuinfo)
    assert {"avx2", "avx512f"} <= flags and "avx512_bf16" not in flags
    native, why = R.native_bf16(flags)
    assert not native and "AVX512_BF16" in why
    assert R.cpu_flags(tmp_path / "missing") == frozenset()


def test_native_bf16_needs_openvino_to_agree():
    """With the flag but without BF16 in OpenVINO's capabilities, bf16 is not native: OpenVINO
    would run fp32 whatever it is asked."""
    ov = pytest.importorskip("openvino")
    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    native, why = R.native_bf16(frozenset({"avx512_bf16"}))
    assert native == ("BF16" in capabilities)
    if not native:
        assert "OpenVINO does not list BF16" in why


def test_this_cpu_is_judged_from_its_flags():
    flags = R.cpu_flags()
    native, _ = R.native_bf16()
    if not flags & {"avx512_bf16", "amx_bf16"}:
        assert not native

"""`napari-sam3 ... --runtime --precision`: passed to the embedded engine, said on stderr."""

from __future__ import annotations

import pytest

from napari_sam3.cli import main


def test_info_says_what_runs_the_graphs(tiny_repository, capsys):
    code = main(["info", "--models", str(tiny_repository), "--runtime", "onnxruntime"])
    out, err = capsys.readouterr()
    assert code == 0
    line = "onnxruntime fp32: encoder, text, decoder"
    assert f"graphs run with {line}" in err and "ONNX Runtime runs fp32" in err
    assert f"runtime={line}" in out  # repr(client): the same line
    assert err.count("ONNX Runtime runs fp32") == 1  # each reason once


def test_bf16_without_native_support_is_a_clear_error(tiny_repository, capsys, avx2_host):
    code = main(["info", "--models", str(tiny_repository), "--precision", "bf16"])
    _, err = capsys.readouterr()
    assert code != 0 and "silently compute fp32" in err and "Traceback" not in err


@pytest.mark.auto_precision
def test_auto_never_fails_on_either_cpu(tiny_repository, capsys, any_host):
    code = main(["info", "--models", str(tiny_repository)])
    out, err = capsys.readouterr()
    assert code == 0, err
    planned = "bf16" if any_host.native_bf16()[0] else "fp32"
    assert f"graphs run with openvino {planned}: encoder" in err, err
    assert "(rule: docs/serving.md#precision)" in err


def test_unknown_runtime_is_refused_by_the_parser(tiny_repository, capsys):
    with pytest.raises(SystemExit):
        main(["info", "--models", str(tiny_repository), "--runtime", "tvm"])
    assert "invalid choice: 'tvm'" in capsys.readouterr().err

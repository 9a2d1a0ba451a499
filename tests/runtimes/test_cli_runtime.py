"""`napari-sam3 ... --runtime --precision`: passed to the embedded engine, said on stderr."""

from __future__ import annotations

import pytest

from napari_sam3.cli import main
from napari_sam3.triton_models.onnx_runner import native_bf16


def test_info_says_what_runs_the_graphs(tiny_repository, capsys):
    code = main(["info", "--models", str(tiny_repository), "--runtime", "onnxruntime"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "graphs run with onnxruntime/fp32 (" in err and "ONNX Runtime runs fp32" in err
    assert "runtime=onnxruntime/fp32" in out  # repr(client)


@pytest.mark.skipif(native_bf16()[0], reason="this CPU computes bf16 natively")
def test_bf16_without_native_support_is_a_clear_error(tiny_repository, capsys):
    code = main(["info", "--models", str(tiny_repository), "--precision", "bf16"])
    _, err = capsys.readouterr()
    assert code != 0 and "silently compute fp32" in err and "Traceback" not in err


def test_unknown_runtime_is_refused_by_the_parser(tiny_repository, capsys):
    with pytest.raises(SystemExit):
        main(["info", "--models", str(tiny_repository), "--runtime", "tvm"])
    assert "invalid choice: 'tvm'" in capsys.readouterr().err

"""One base exception, and the exit codes the commands return for it, in one place."""

from __future__ import annotations

import pytest

import napari_sam3
from napari_sam3.core import errors


def _ours():
    from napari_sam3.cli import UsageError
    from napari_sam3.client.cache import ModelChanged
    from napari_sam3.prompts.vector import ExemplarsOutside
    from napari_sam3.runtime.engines.triton import RequestTimeout
    from napari_sam3.runtime.onnx_runner import GraphCompileError, PrecisionUnavailable
    from napari_sam3.scene.batch import FolderLocked
    from napari_sam3.serving.ports import PortError
    from napari_sam3.serving.repository_check import RepositoryError
    from napari_sam3.serving.server import ServeError

    refused = (UsageError, ExemplarsOutside, PrecisionUnavailable, PortError, RepositoryError)
    failed = (ModelChanged, RequestTimeout, GraphCompileError, FolderLocked, ServeError)
    return refused, failed


def test_every_error_of_the_package_is_a_sam3_error_with_its_exit_code():
    refused, failed = _ours()
    for cls in refused:
        assert issubclass(cls, errors.Sam3Error) and cls.exit_code == errors.EXIT_REFUSED, cls
    for cls in failed:
        assert issubclass(cls, errors.Sam3Error) and cls.exit_code == errors.EXIT_FAILED, cls
    assert napari_sam3.Sam3Error is errors.Sam3Error
    # still the built-in types callers catch
    assert issubclass(refused[2], ValueError) and issubclass(failed[4], RuntimeError)


def test_the_commands_return_the_errors_exit_code(tmp_path, capsys):
    from napari_sam3.cli import main as napari_sam3_main
    from napari_sam3.serving.command import main as sam3_serve_main

    # refused before anything ran: a folder that is no model repository
    assert sam3_serve_main([str(tmp_path)]) == errors.EXIT_REFUSED
    assert "not a napari-sam3 model repository" in capsys.readouterr().err
    missing = str(tmp_path / "missing.tif")
    out = str(tmp_path / "out")
    code = napari_sam3_main(
        ["segment", missing, "--models", str(tmp_path), "--prompt", "road", "--out", out]
    )
    assert code == errors.EXIT_REFUSED
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("code", [errors.EXIT_OK, errors.EXIT_FAILED, errors.EXIT_REFUSED])
def test_the_codes_are_distinct(code):
    assert [errors.EXIT_OK, errors.EXIT_FAILED, errors.EXIT_REFUSED].count(code) == 1

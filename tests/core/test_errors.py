"""One base exception, and the exit codes the commands return for it, in one place."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import textwrap

import pytest

import napari_sam3
from napari_sam3.core import errors

# each class of ours and the built-in it keeps, so that `except <built-in>` still catches it
REFUSED = {
    errors.InvalidInput: ValueError,
    errors.InvalidType: TypeError,
    errors.MissingFile: FileNotFoundError,
    errors.OutputExists: FileExistsError,
    errors.MissingDependency: ImportError,
    errors.UnknownKey: KeyError,
    errors.OutOfRange: IndexError,
    errors.InvalidState: RuntimeError,
}
FAILED = {
    errors.BadData: ValueError,
    errors.RunFailed: RuntimeError,
    errors.ConnectionFailed: ConnectionError,
    errors.TimedOut: TimeoutError,
    errors.FileSystemError: OSError,
}


def _ours():
    from napari_sam3.cli import UsageError
    from napari_sam3.client.cache import ModelChanged
    from napari_sam3.prompts.vector import ExemplarsOutside
    from napari_sam3.runtime.engines.triton import RequestTimeout
    from napari_sam3.runtime.onnx_runner import GraphCompileError, PrecisionUnavailable
    from napari_sam3.scene.batch import FolderLocked
    from napari_sam3.scene.output import OutputIsInput
    from napari_sam3.serving.ports import PortError
    from napari_sam3.serving.repository_check import RepositoryError
    from napari_sam3.serving.server import ServeError

    refused = (UsageError, ExemplarsOutside, PrecisionUnavailable, PortError, RepositoryError)
    refused += (OutputIsInput, *REFUSED)
    failed = (ModelChanged, RequestTimeout, GraphCompileError, FolderLocked, ServeError)
    failed += tuple(FAILED)
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


@pytest.mark.parametrize("cls", [*REFUSED, *FAILED], ids=lambda cls: cls.__name__)
def test_each_error_is_its_builtin_too_says_its_message_and_pickles(cls):
    builtin = {**REFUSED, **FAILED}[cls]
    message = f"{cls.__name__}: the message says what to do"
    error = cls(message)
    assert isinstance(error, errors.Sam3Error) and isinstance(error, builtin)
    assert str(error) == message  # KeyError would quote it; UnknownKey does not
    with pytest.raises(builtin, match=message):
        raise error
    # errors cross Dask workers and processes
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls and str(back) == message and back.args == error.args


def test_the_private_and_composite_errors_pickle_with_their_fields():
    from napari_sam3.client.cache import ModelChanged
    from napari_sam3.prompts.concept import _BadConceptFile
    from napari_sam3.prompts.query import _WrongType
    from napari_sam3.runtime.engines.pool import _OtherModel
    from napari_sam3.runtime.engines.triton import RequestTimeout

    other = pickle.loads(pickle.dumps(_OtherModel("another model", "abc123")))
    assert isinstance(other, errors.InvalidInput) and other.model_id == "abc123"
    changed = pickle.loads(pickle.dumps(ModelChanged("changed", address="a:1", new_model_id="n")))
    assert (changed.address, changed.new_model_id, str(changed)) == ("a:1", "n", "changed")
    timeout = pickle.loads(pickle.dumps(RequestTimeout("late")))
    assert isinstance(timeout, errors.ConnectionFailed) and isinstance(timeout, errors.TimedOut)
    assert isinstance(_WrongType("x"), TypeError) and isinstance(_WrongType("x"), ValueError)
    assert issubclass(_BadConceptFile, errors.BadData)


def test_the_copies_beside_a_triton_model_raise_the_same_errors(tmp_path):
    """sam3-export copies the model code with core/errors.py into each Python model's folder,
    where they import each other as plain modules; there they raise the same classes."""
    from napari_sam3.runtime.engines.repository_code import _package_sources

    names = []
    for name, source in _package_sources().items():
        shutil.copyfile(source, tmp_path / name)
        if source.name != "triton_adapter.py":  # the adapter (model.py) needs Triton's module
            names.append(name.removesuffix(".py"))
    script = textwrap.dedent(
        f"""
        import importlib, sys
        sys.modules["napari_sam3"] = None  # nothing of the package: only the copies
        sys.path.insert(0, {str(tmp_path)!r})
        for name in {sorted(names)!r}:
            importlib.import_module(name)
        import errors, onnx_runner, rle
        try:
            rle.decode_masks(b"not a payload")
        except errors.BadData as error:
            print("BadData", error)
        try:
            onnx_runner.check_choice("tensorflow", "fp32")
        except errors.InvalidInput as error:
            print("InvalidInput", error)
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "BadData RLE payload truncated" in run.stdout, run.stdout
    assert "InvalidInput unknown runtime 'tensorflow'" in run.stdout, run.stdout

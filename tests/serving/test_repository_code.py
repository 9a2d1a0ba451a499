"""A repository's copy of the model code is checked against the installed package, and
`sam3-export --refresh` brings it up to date without a re-export."""

from __future__ import annotations

import shutil

import pytest

from napari_sam3.core import contract
from napari_sam3.runtime.engines.local import LocalEngine
from napari_sam3.runtime.engines.repository_code import stale_logic
from napari_sam3.serving.repository_check import RepositoryError, check_repository


@pytest.fixture
def old_repository(tiny_repository, tmp_path):
    """The tiny repository as an older napari-sam3 would have written it: two copies differ."""
    repo = tmp_path / "repository"
    shutil.copytree(tiny_repository, repo)
    for copy in (
        repo / contract.CACHED / "1" / "cached.py",
        repo / contract.TEXT / "1" / "host.py",
    ):
        copy.write_text(copy.read_text() + "\n# an older version\n")
    return repo


def test_a_fresh_export_holds_this_versions_code(tiny_repository):
    assert stale_logic(tiny_repository) == []
    check_repository(tiny_repository)


def test_sam3_serve_refuses_other_code_and_says_how_to_refresh(old_repository):
    assert stale_logic(old_repository) == ["sam3_cached/1/cached.py", "sam3_text/1/host.py"]
    with pytest.raises(RepositoryError) as info:
        check_repository(old_repository)
    message = str(info.value)
    assert "sam3_cached/1/cached.py" in message and "another version" in message
    assert f"sam3-export --refresh --out {old_repository}" in message


def test_the_embedded_engine_warns_with_the_command(old_repository):
    with pytest.warns(UserWarning, match="sam3-export --refresh --out"):
        LocalEngine(old_repository, precision="fp32")


def test_refresh_rewrites_the_code_and_keeps_graphs_and_options(old_repository, capsys):
    from sam3_export.cli import main

    graph = contract.graph_path(old_repository, contract.ENCODER)
    before = graph.stat().st_mtime_ns
    configs = {p.parent.name: p.read_text() for p in old_repository.glob("*/config.pbtxt")}
    assert main(["--refresh", "--out", str(old_repository), "-q"]) == 0
    assert stale_logic(old_repository) == []
    check_repository(old_repository)
    assert graph.stat().st_mtime_ns == before  # the graphs are kept
    # written as it was: python flavor, cpu, runtime and precision unchanged
    after = {p.parent.name: p.read_text() for p in old_repository.glob("*/config.pbtxt")}
    assert after == configs


def test_refresh_of_a_folder_that_is_no_repository_is_a_clear_error(tmp_path, capsys):
    from sam3_export.cli import main

    assert main(["--refresh", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot refresh" in err and "Traceback" not in err

"""`napari-sam3 demo` reuses an exported repository only when it holds the asked-for model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from napari_sam3.cli import ensure_repository
from napari_sam3.core import contract


def test_reuses_the_same_model_and_refuses_another(tiny_repository, tmp_path):
    repo = Path(shutil.copytree(tiny_repository, tmp_path / "repo"))
    assert ensure_repository(repo, None, "tiny") == repo  # random weights again: reused
    with pytest.raises(FileExistsError, match="random weights"):
        ensure_repository(repo, tmp_path / "sam3.pt", "full")

    manifest_path = repo / contract.MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text())
    manifest.update(random_weights=False, checkpoint="sam3.pt")
    manifest_path.write_text(json.dumps(manifest))
    assert ensure_repository(repo, tmp_path / "elsewhere" / "sam3.pt", "full") == repo
    with pytest.raises(FileExistsError, match="a checkpoint"):
        ensure_repository(repo, None, "tiny")
    with pytest.raises(FileExistsError):
        ensure_repository(repo, tmp_path / "other.pt", "full")

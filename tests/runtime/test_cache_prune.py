"""OpenVINO's compiled-model cache stays within its bound: the least recently used graph folders
go, never the one in use, a recently used one (another process's), or anything not ours."""

from __future__ import annotations

import os
import time
from pathlib import Path

from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner as R

MB = 2**20
HOUR = R.CACHE_IN_USE_S


def _folder(base: Path, name: str, size: int, age_s: float) -> Path:
    folder = base / name
    folder.mkdir(parents=True)
    (folder / "model.blob").write_bytes(b"\0" * size)
    stamp = time.time() - age_s
    os.utime(folder, (stamp, stamp))
    return folder


def test_the_least_recently_used_folders_go_until_the_cache_fits(tmp_path):
    oldest = _folder(tmp_path, "a" * 32, 3 * MB, 5 * HOUR)
    older = _folder(tmp_path, "b" * 32, 3 * MB, 4 * HOUR)
    old = _folder(tmp_path, "c" * 32, 3 * MB, 3 * HOUR)
    current = _folder(tmp_path, "d" * 32, 3 * MB, 0)
    removed = R.prune_cache(tmp_path, current, max_bytes=7 * MB)
    assert removed == [oldest, older]  # 12 MB -> 6 MB: the two least recently used
    assert old.is_dir() and current.is_dir()
    assert R.prune_cache(tmp_path, current, max_bytes=7 * MB) == []  # within the bound now


def test_the_folder_in_use_recent_ones_and_foreign_files_are_never_removed(tmp_path):
    keep = _folder(tmp_path, "e" * 32, 4 * MB, 9 * HOUR)  # in use by this runner, though old
    recent = _folder(tmp_path, "f" * 32, 4 * MB, HOUR / 2)  # maybe another process's
    foreign = _folder(tmp_path, "my-own-things", 4 * MB, 9 * HOUR)
    (tmp_path / ("0" * 32)).write_bytes(b"a file, not a graph folder")
    assert R.prune_cache(tmp_path, keep, max_bytes=0) == []
    assert keep.is_dir() and recent.is_dir() and foreign.is_dir()
    assert (tmp_path / ("0" * 32)).is_file()


def test_compiling_a_graph_prunes_the_stale_folders_of_other_exports(tiny_repository, tmp_path):
    stale = _folder(tmp_path, "9" * 32, 2 * MB, 48 * HOUR)  # an export deleted long ago
    version = str(contract.graph_path(tiny_repository, contract.TEXT).parent)
    params = {"runtime": "openvino", "precision": "fp32", "openvino_cache_dir": str(tmp_path)}
    R.Logic(version, {**params, "openvino_cache_bytes": str(100 * 2**30)})
    assert stale.is_dir()  # within a roomy bound nothing goes
    logic = R.Logic(version, {**params, "openvino_cache_bytes": str(MB)})
    assert not stale.exists() and logic.runner.pruned == [stale]
    assert logic.runner.cache_dir.is_dir()  # the graph's own folder stays, over the bound or not


def test_a_folder_another_process_removed_meanwhile_is_passed_over(tmp_path):
    gone = tmp_path / ("7" * 32)  # listed, then removed by another process's pruning
    assert R._folder_use(gone) is None
    current = _folder(tmp_path, "8" * 32, MB, 0)
    assert R.prune_cache(tmp_path, current, max_bytes=0) == []

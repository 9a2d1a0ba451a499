"""Disks that fill: every output format, and the tile journal, written under a file-size limit
(RLIMIT_FSIZE, SIGXFSZ ignored, so a write past it fails with EFBIG as on a full disk) fails
with a FileSystemError naming the file and what to do, and leaves no file behind: neither the
target nor a temporary one. (No small file system can be had here without mounting one, so the
limit stands for a full disk; the full-disk errno takes the same path.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from napari_sam3.core.errors import BadData, FileSystemError
from napari_sam3.core.files import atomic_path
from napari_sam3.core.formats import OUTPUT_FORMATS

LIMIT = 48 * 1024

# Writes every format (argv[2]: a JSON list of names) into its own folder under argv[1], and a
# large tile record into a journal, under LIMIT; prints what each raised and what was left.
WRITER = """
import json, resource, signal, sys
from pathlib import Path
import numpy as np, geopandas as gpd, shapely
from rasterio.transform import from_origin
from napari_sam3.core.formats import OUTPUT_FORMATS
from napari_sam3.gis.vector import write_labels_geotiff, write_vector
from napari_sam3.masks.rle import RleMask
from napari_sam3.scene.journal import TileJournal
from napari_sam3.scene.masks import SceneMask
from napari_sam3.scene.merge import Detection

root, names, limit = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
n = 3000
rng = np.random.default_rng(0)
polygons = [shapely.box(i, i % 50, i + 0.9, i % 50 + 0.9).buffer(0.3) for i in range(n)]
gdf = gpd.GeoDataFrame({"score": rng.random(n), "keyword": ["building"] * n},
                       geometry=polygons, crs="EPSG:32633")
labels = rng.integers(0, 1000, (1200, 1200)).astype(np.int32)
grid = {"transform": from_origin(300000, 5800000, 10, 10), "crs": "EPSG:32633"}
noise = RleMask.from_dense(rng.random((400, 400)) < 0.5)
dets = [Detection(SceneMask(noise, 0, 0, (400, 400)), np.zeros(4, np.float32), 0.5, "building",
                  "text", 0, False)]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
said = {}
for name in [*names, "journal"]:
    folder = root / name
    folder.mkdir()
    try:
        if name == "journal":
            journal = TileJournal.open(folder / "run", {"query": "q"}, False)
            journal.add(0, dets)
            journal.close()  # the record is written beside the run: its failure comes here
        elif OUTPUT_FORMATS[name].vector:
            write_vector(gdf, folder / f"out{OUTPUT_FORMATS[name].suffix}")
        else:
            write_labels_geotiff(labels, folder / "out.tif", grid, cog=name == "cog")
        said[name] = ["none", ""]
    except Exception as error:
        said[name] = [type(error).__name__, str(error)]
    said[name].append(sorted(str(p.relative_to(folder)) for p in folder.rglob("*")))
print(json.dumps(said))
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """What each format's write said under the limit (one process for all of them)."""
    root = tmp_path_factory.mktemp("full")
    names = json.dumps(list(OUTPUT_FORMATS))
    run = subprocess.run(
        [sys.executable, "-c", WRITER, str(root), names, str(LIMIT)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    return root, json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", [*OUTPUT_FORMATS, "journal"])
def test_a_write_the_disk_cannot_take_fails_clearly_and_leaves_nothing(written, name):
    root, said = written
    error, message, left = said[name]
    target = root / name / ("run" if name == "journal" else "out")
    assert error == "FileSystemError", message
    assert f"cannot write {target}" in message and "File too large" in message
    assert f"free space in {root / name}" in message
    # nothing partial: no target, no temporary (the journal keeps its folder and its run.json,
    # written before the record that did not fit)
    assert left == (["run", "run/run.json"] if name == "journal" else [])


def test_a_failure_that_is_not_the_disk_s_passes_unchanged(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(BadData, match="a writer's own failure"), atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 100_000)
        raise BadData("a writer's own failure")
    assert list(tmp_path.iterdir()) == []
    assert not issubclass(BadData, FileSystemError)

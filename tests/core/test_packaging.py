"""The client package stands without torch, and its wheel carries the napari manifest."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_client_side_never_imports_torch():
    modules = [
        "napari_sam3.client.sam3",
        "napari_sam3.scene",
        "napari_sam3.gis.vector",
        "napari_sam3.serving.command",
        "napari_sam3.cli",
        "napari_sam3.runtime.engines.triton",
        "napari_sam3.client.automatic",
        "napari_sam3.plugin.reader",
        "napari_sam3.plugin.writers",
        "napari_sam3.plugin.vector_reader",
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sam3', 'sam3_export'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_embedded_client_never_imports_grpc(tiny_repository):
    """An embedded-only user (no Triton server) does not load grpc, not even to read configs."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import napari_sam3\n"
        "from napari_sam3 import Sam3Client\n"
        f"client = Sam3Client.local({str(tiny_repository)!r}, precision='fp32')\n"
        "frame = client.segment(np.zeros((40, 50, 3), np.uint8), 'x', score_thr=0, dedup=None)\n"
        "assert len(frame) == client.manifest.num_queries, len(frame)\n"
        "client.close()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'grpc' or "
        "m.startswith('tritonclient.grpc'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_wheel_ships_the_manifest_as_a_file(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("napari_sam3-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        manifest = yaml.safe_load(archive.read("napari_sam3/napari.yaml"))
        entry_points = archive.read(
            next(n for n in names if n.endswith("entry_points.txt"))
        ).decode()
    assert manifest == yaml.safe_load((ROOT / "napari.yaml").read_text())
    assert manifest["name"] == "napari-sam3"
    assert "napari_sam3/data/bpe_simple_vocab_16e6.txt.gz" in names
    assert "napari_sam3/runtime/triton_adapter.py" in names
    assert "napari-sam3 = napari_sam3:napari.yaml" in entry_points
    assert not any(n.startswith(("torch", "sam3_export")) for n in names)


def test_a_real_import_error_in_the_model_logic_is_not_hidden(monkeypatch):
    """Inside the package the logic modules import their siblings relatively; a failing import
    must surface as itself, not as the copies' fallback ("No module named 'rle'")."""
    import importlib
    import sys

    from napari_sam3.runtime import postprocess

    monkeypatch.setitem(sys.modules, "napari_sam3.masks.rle", None)  # as if it failed to import
    with pytest.raises(ImportError) as info:
        importlib.reload(postprocess)
    assert "napari_sam3.masks.rle" in str(info.value)
    monkeypatch.undo()
    importlib.reload(postprocess)
